"""BootServices (real dnsmasq + nginx in a private network namespace) and host-key pinning against a real sshd."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from bootstrap.provision.api import BootConfig
from bootstrap.provision.hostkeys import HostKeyMismatch, ensure_host_key, fingerprint_of, verify_host_key
from bootstrap.provision.render import render_boot_tree
from tests.provision.netlab import BRIDGE, CALLBACK_PORT, SERVER_IP, NetLab, netns_available
from tests.sshnode import start_ssh_node

FETCH = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n    r = urllib.request.urlopen(sys.argv[1], timeout=5)\n"
    "    print(r.status); sys.stdout.write(r.read().decode())\n"
    "except urllib.error.HTTPError as e:\n    print(e.code)\n"
)


def _get(lab: NetLab, url: str) -> tuple[int, str]:
    out = lab.nsexec("python3", "-c", FETCH, url)
    status, _, body = out.partition("\n")
    return int(status), body


@pytest.mark.lab
def test_boot_services_serve_the_tree_proxy_callbacks_and_stop_by_pid(lab_inventory, tmp_path: Path, artefacts) -> None:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    tree = render_boot_tree(
        BootConfig(
            inventory=lab_inventory,
            out_dir=tmp_path / "state" / "boot",
            server_ip=SERVER_IP,
            interface=BRIDGE,
            callback_upstream=f"127.0.0.1:{CALLBACK_PORT}",
            nodes=["gpu-01"],
            **artefacts,
        )
    )
    boot = tree.nodes["gpu-01"]
    (tmp_path / "lab").mkdir()
    with NetLab(tmp_path / "lab") as lab:
        services = lab.start_services(tree)
        pids = services.pids
        assert set(pids) == {"nginx", "dnsmasq"}
        status, body = _get(lab, tree.url(f"ipxe/{boot.mac_hyphen}.ipxe"))
        assert status == 200 and f"rackctl.token={boot.token}" in body
        assert _get(lab, tree.url("ipxe/52-54-00-99-00-13.ipxe"))[0] == 404  # not selected: boots from disk
        assert _get(lab, tree.url(f"private/gpu-01/{boot.token}/hostname")) == (200, "gpu-01\n")
        assert _get(lab, tree.url("private/gpu-01/"))[0] in (403, 404)  # no listing of tokens
        assert _get(lab, tree.url(f"private/gpu-01/{boot.token}x/hostname"))[0] == 404
        for _ in range(50):  # the receiver starts in the background
            if _get(lab, tree.url(f"callback/gpu-01?token={boot.token}&status=ok&detail=x"))[0] == 200:
                break
            time.sleep(0.1)
        assert lab.callbacks()[-1] == {"path": "/callback/gpu-01", "token": boot.token, "status": "ok", "detail": "x"}
        listening = lab.nsexec("ss", "-Hltnup")
        assert f"{SERVER_IP}:8080" in listening and "0.0.0.0:8080" not in listening
        services.stop()
        assert services.pids == {}
        for pid in pids.values():
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_verify_host_key_accepts_the_pinned_key_and_refuses_another(tmp_path: Path) -> None:
    node = start_ssh_node(tmp_path / "ssh")
    try:
        seen = verify_host_key("127.0.0.1", node.port, node.host_public_key)
        assert seen == fingerprint_of(node.host_public_key)
        assert verify_host_key("127.0.0.1", node.port, seen) == seen
        other = ensure_host_key(tmp_path / "state", "gpu-01")
        with pytest.raises(HostKeyMismatch) as exc:
            verify_host_key("127.0.0.1", node.port, other.public_line)
        assert other.fingerprint in exc.value.message and seen in exc.value.message
    finally:
        node.stop()


def test_host_keys_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    key = ensure_host_key(tmp_path, "gpu-01")
    again = ensure_host_key(tmp_path, "gpu-01")
    assert again.public_line == key.public_line
    assert oct(os.stat(key.private_path).st_mode & 0o777) == "0o600"
    # ssh-keygen reads the private key and derives the same public key.
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key.private_path)], capture_output=True, text=True, check=True
    )
    assert derived.stdout.split()[:2] == key.public_line.split()
    assert ensure_host_key(tmp_path, "gpu-02").public_line != key.public_line
