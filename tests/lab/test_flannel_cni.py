"""The lab's CNI plugin of type ``flannel`` (rackctl_lab/components/flannel_cni), run as a container runtime
runs it: the CNI protocol's environment and config on stdin, a delegate found on ``CNI_PATH``.

Upstream's plugin (flannel-io/cni-plugin) is not served by the Go module proxy, so the lab writes its own;
these tests hold it to flannel's documented contract. The delegate here is a recorder script named
``bridge`` (what the plugin hands over is the point); the real bridge and host-local run under it in the
real cluster test (tests/ansible/test_kubernetes_cluster_real.py), where pods get addresses through it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import built_components

CONFIG = {
    "cniVersion": "0.3.1",
    "name": "cbr0",
    "type": "flannel",
    "delegate": {"hairpinMode": True, "isDefaultGateway": True},
}
LEASE = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.2.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
#: what the recording delegate answers: a CNI result, passed through by the plugin as its own
RESULT = {"cniVersion": "0.3.1", "ips": [{"address": "10.244.2.5/24", "gateway": "10.244.2.1"}]}


@pytest.fixture(scope="module")
def plugin() -> Path:
    return built_components(("flannel",))["flannel"]


def _run(plugin: Path, tmp_path: Path, command: str, config: dict[str, object]) -> subprocess.CompletedProcess[str]:
    bins = tmp_path / "bin"
    bins.mkdir(exist_ok=True)
    recorder = bins / "bridge"
    recorder.write_text(
        f"#!/bin/sh\ncat > {tmp_path}/delegate-$CNI_COMMAND.json\n"
        f"[ \"$CNI_COMMAND\" = ADD ] && echo '{json.dumps(RESULT)}'\nexit 0\n"
    )
    recorder.chmod(0o755)
    env = {
        "CNI_COMMAND": command, "CNI_CONTAINERID": "c0ffee", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
        "CNI_PATH": str(bins), "PATH": os.environ["PATH"],
    }  # fmt: skip
    conf = {"subnetFile": str(tmp_path / "subnet.env"), "dataDir": str(tmp_path / "data"), **config}
    return subprocess.run([str(plugin)], input=json.dumps(conf), env=env, capture_output=True, text=True, check=False)


def test_add_hands_the_pod_to_bridge_with_host_local_on_the_nodes_subnet(plugin: Path, tmp_path: Path) -> None:
    (tmp_path / "subnet.env").write_text(LEASE)
    proc = _run(plugin, tmp_path, "ADD", CONFIG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == RESULT  # the delegate's result is the plugin's
    delegate = json.loads((tmp_path / "delegate-ADD.json").read_text())
    assert delegate == {
        "cniVersion": "0.3.1", "name": "cbr0", "type": "bridge", "hairpinMode": True, "isDefaultGateway": True,
        "isGateway": True, "ipMasq": False, "mtu": 1450,  # flanneld masquerades itself (FLANNEL_IPMASQ=true)
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.244.2.0/24"}]],  # the lease's network, not its gateway address
            "routes": [{"dst": "10.244.0.0/16"}],
        },
    }  # fmt: skip
    # kept for DEL and CHECK, readable by root only
    kept = tmp_path / "data" / "c0ffee"
    assert json.loads(kept.read_text()) == delegate and oct(kept.stat().st_mode & 0o777) == "0o600"


def test_del_hands_the_kept_config_back_and_forgets_it_and_a_second_del_succeeds(plugin: Path, tmp_path: Path) -> None:
    (tmp_path / "subnet.env").write_text(LEASE)
    assert _run(plugin, tmp_path, "ADD", CONFIG).returncode == 0
    (tmp_path / "subnet.env").unlink()  # DEL must not need the lease (flanneld may be gone)
    first = _run(plugin, tmp_path, "DEL", CONFIG)
    assert first.returncode == 0, first.stdout
    assert json.loads((tmp_path / "delegate-DEL.json").read_text())["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24"}]]
    assert not (tmp_path / "data" / "c0ffee").exists()
    second = _run(plugin, tmp_path, "DEL", CONFIG)
    assert second.returncode == 0, second.stdout  # the spec: DEL of what is not there succeeds


def test_before_flanneld_wrote_the_lease_add_fails_with_a_cni_error_saying_so(plugin: Path, tmp_path: Path) -> None:
    proc = _run(plugin, tmp_path, "ADD", CONFIG)
    assert proc.returncode == 1
    error = json.loads(proc.stdout)
    assert error["code"] == 11 and "flanneld has not written this node's subnet yet" in error["msg"]
    assert "subnet.env" in error["details"]
    assert not (tmp_path / "delegate-ADD.json").exists()


def test_version_lists_the_spec_versions_it_speaks(plugin: Path, tmp_path: Path) -> None:
    proc = _run(plugin, tmp_path, "VERSION", {})
    assert {"0.3.1", "1.0.0", "1.1.0"} <= set(json.loads(proc.stdout)["supportedVersions"])
