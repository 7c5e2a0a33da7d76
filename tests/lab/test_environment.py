"""The environment seam: the product finds the lab only through the ``rackctl.environments`` entry point,
and the lab's implementation answers from what ``rackctl lab up`` recorded (no VMs needed here)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.environment import Environment, HostEnvironment, available, load_environment
from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from rackctl_lab.environment import LabEnvironment
from rackctl_lab.vms import LabVms, LabVmState

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "examples" / "dvd-inference.yml"


def _record_lab(lab_dir: Path) -> LabVmState:
    """What ``lab up`` writes about its network (the state file the lab's environment reads)."""
    state = LabVmState(netns="rkt-env", bridge="rktenv0", address="10.210.0.1/24")
    vms = LabVms(lab_dir)
    vms.dir.mkdir(parents=True)
    vms.state_path.write_text(state.to_json())
    return state


def test_the_lab_is_registered_as_an_environment_and_implements_the_contract(tmp_path: Path) -> None:
    assert "lab" in available() and "host" in available()
    env = load_environment("lab", lab_dir=tmp_path)
    assert isinstance(env, LabEnvironment) and isinstance(env, Environment)
    assert isinstance(load_environment(None), HostEnvironment)


def test_lab_environment_answers_from_the_lab_record(tmp_path: Path) -> None:
    state = _record_lab(tmp_path)
    env = LabEnvironment(tmp_path)
    inventory = load_inventory(EXAMPLE)
    site = env.boot_site(inventory)
    assert (site.server_ip, site.interface) == ("10.210.0.1", state.bridge)
    assert env.wrap_command(["nginx", "-t"]) == ["ip", "netns", "exec", "rkt-env", "nginx", "-t"]
    proxy = env.ssh_proxy_command()
    assert proxy is not None and "rackctl_lab.nsrelay rkt-env %h %p" in proxy
    assert env.admin_key(inventory) is None  # no key until `lab up` made one
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "id_ed25519").write_text("key")
    assert env.admin_key(inventory) == tmp_path / "ssh" / "id_ed25519"
    heads = {n.hostname for n in inventory.nodes if n.role.value == "head"}
    assert env.preinstalled(inventory) == heads
    assert set(env.out_of_band_only(inventory)) == heads  # the head node is this machine: never SSH-configured
    assert HostEnvironment().out_of_band_only(inventory) == {}


def test_lab_environment_without_lab_up_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        LabEnvironment(tmp_path / "nothing").wrap_command(["true"])
    assert "rackctl lab up" in err.value.problems[0].fix


def test_host_environment_reaches_nodes_directly() -> None:
    env = HostEnvironment()
    assert env.wrap_command(["dnsmasq"]) == ["dnsmasq"] and env.ssh_proxy_command() is None
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with env.connect("127.0.0.1", port, 2.0) as conn:
            assert conn.getpeername()[1] == port


def test_unknown_environment_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--env", "moon", "plan", "-i", str(EXAMPLE), "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "moon" in result.output and "lab" in result.output and "host" in result.output


def test_the_product_imports_no_lab_module() -> None:
    """Importing the whole CLI and every stage pulls nothing from the lab (the contracts check this statically)."""
    code = (
        "import sys, bootstrap.cli, bootstrap.stages.base as b, bootstrap.provision.flow;"
        "b.load_stages();"
        "print(sorted(m for m in sys.modules if m.startswith('rackctl_lab')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []
