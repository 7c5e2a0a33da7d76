"""The access model: which address, user, key, known_hosts and proxy each node is reached with."""

from __future__ import annotations

import shlex
from pathlib import Path

from bootstrap.environment import HostEnvironment
from bootstrap.inband.access import access_address, node_access
from bootstrap.inventory import load_inventory
from bootstrap.provision.hostkeys import known_hosts_path

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


class ProxiedEnvironment(HostEnvironment):
    """The host environment with a proxy command and a key (what the lab's supplies)."""

    def ssh_proxy_command(self) -> str | None:
        return "/usr/bin/python3 -m relay 'ns 1' %h %p"

    def admin_key(self, inventory: object) -> Path | None:
        return Path("/keys/admin")


def test_each_node_is_reached_on_its_pxe_address_with_the_pinned_known_hosts(tmp_path: Path) -> None:
    inventory = load_inventory(EXAMPLE)
    access = node_access(inventory, tmp_path, HostEnvironment())
    assert set(access) == {n.hostname for n in inventory.nodes}
    for node in inventory.nodes:
        item = access[node.hostname]
        assert item.address == str(node.address_on("pxe") or node.address_on("management"))
        assert item.known_hosts == known_hosts_path(tmp_path).resolve()
        assert item.user == ("root" if inventory.cluster.install_method.value == "image" else "rackctl")
        assert item.proxy_command is None


def test_the_environment_supplies_key_and_proxy_and_checking_is_strict(tmp_path: Path) -> None:
    inventory = load_inventory(EXAMPLE)
    host = inventory.nodes[1].hostname
    hostvars = node_access(inventory, tmp_path, ProxiedEnvironment())[host].ansible_vars()
    assert hostvars["ansible_ssh_private_key_file"] == "/keys/admin"
    args = shlex.split(hostvars["ansible_ssh_common_args"])  # how ansible splits it
    assert "ProxyCommand=/usr/bin/python3 -m relay 'ns 1' %h %p" in args
    assert "StrictHostKeyChecking=yes" in args and "GlobalKnownHostsFile=/dev/null" in args


def test_without_a_pxe_address_the_management_address_is_used() -> None:
    inventory = load_inventory(EXAMPLE)
    node = inventory.nodes[0].model_copy(
        update={"interfaces": [i for i in inventory.nodes[0].interfaces if i.network != "pxe"]}
    )
    assert access_address(node) == str(node.address_on("management"))
