"""Role ``nvidia_host``'s nvidia-smi read (``tasks/smi.yml``) over real SSH: which nvidia-smi it runs, the chroot into
the GPU Operator's driver container, and the nvidia stage's validation reading it again until every GPU is
registered with Fabric Manager (bootstrap/stages/nvidia/fabric.py), with the real runner, ansible-runner, journal
and kube-apiserver 1.37.2.

The nodes are sshd on loopback (tests/ansible/test_playbook_stage.py's ``rack``: gpu-01 serves its pinned host
key, gpu-02 another one), so the role runs on this machine, which has no GPU and no NVIDIA driver. TEST DOUBLE:
the GPU Operator's driver container is stood in for by a directory given as ``nvidia_host_driver_root`` (the role
variable, default /run/nvidia/driver): a static busybox as its ``/bin/sh`` and ``/bin/cat``, and as its
``/usr/bin/nvidia-smi`` a shell script that prints the recorded ``nvidia-smi -q -x`` of an XE9680
(tests/nvidia/fixtures) and notes each call. The role really runs ``chroot <root> /usr/bin/nvidia-smi -q -x`` on
it (root over SSH here). The host's nvidia-smi is stood in for the same way (``nvidia_host_smi_path``). Fabric
Manager itself is stood in for by a test thread that turns the report's fabric states to ``Completed`` once the
validation has read them ``In Progress``.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstrap.journal.store import Journal
from bootstrap.kube import Kubectl
from bootstrap.nvidia.detect import NvSwitchReport
from bootstrap.nvidia.smi import OPERATOR
from bootstrap.stages.base import RunOptions, StageContext
from bootstrap.stages.nvidia.fabric import FabricReader
from bootstrap.validation.checks import GpuNodeFacts
from bootstrap.validation.live import poll_read_only
from tests.ansible.test_nvidia_host_stage import EmulatedGpus, run_nvidia
from tests.ansible.test_playbook_stage import RelayEnvironment, networked, rack  # noqa: F401 - the fixtures
from tests.kube_objects import KubeObjects
from tests.sshnode import refused_host_key

FIXTURES = Path(__file__).resolve().parents[1] / "nvidia" / "fixtures"
BUSYBOX = shutil.which("busybox")
COMPLETED = (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()
IN_PROGRESS = COMPLETED.replace("<state>Completed</state>", "<state>In Progress</state>")
#: What the host side would have detected on an NVSwitch node (the test's nodes are L40S R760xa: the reader is
#: given the node explicitly, as the stage gives it its operator-driver NVSwitch nodes).
SWITCHES = NvSwitchReport(pci_slots=["0000:07:00.0"])

pytestmark = [
    pytest.mark.skipif(BUSYBOX is None, reason="busybox (static) is needed for the driver container's stand-in"),
    pytest.mark.skipif(Path("/usr/bin/nvidia-smi").exists(), reason="this machine has a real nvidia-smi"),
]

STAND_IN = """#!/bin/sh
# TEST DOUBLE of nvidia-smi (no GPU here): prints the recorded report and notes the call.
echo "$*" >> {log}
exec /bin/cat {xml}
"""


@dataclasses.dataclass
class StandInSmi:
    """A stand-in nvidia-smi: ``report`` is what it prints, ``calls`` one line per run."""

    report: Path
    calls: Path

    def count(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0

    def prints(self, xml: str) -> None:
        """What the next runs print (written whole, by rename: a run never reads half of it)."""
        new = self.report.with_suffix(".new")
        new.write_text(xml)
        new.replace(self.report)


def driver_root(root: Path, xml: str) -> StandInSmi:
    """The driver container's root filesystem stand-in, its nvidia-smi printing ``xml``."""
    (root / "bin").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    shutil.copy2(str(BUSYBOX), root / "bin" / "busybox")
    for applet in ("sh", "cat"):
        (root / "bin" / applet).symlink_to("busybox")
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.write_text(STAND_IN.format(log="/smi-calls", xml="/smi.xml"))
    smi.chmod(0o755)
    stand_in = StandInSmi(root / "smi.xml", root / "smi-calls")
    stand_in.prints(xml)
    return stand_in


def host_smi(folder: Path, xml: str) -> tuple[Path, StandInSmi]:
    """A stand-in for the host's own nvidia-smi (host driver packages), printing ``xml``."""
    folder.mkdir(parents=True)
    smi = folder / "nvidia-smi"
    stand_in = StandInSmi(folder / "smi.xml", folder / "smi-calls")
    smi.write_text(STAND_IN.format(log=stand_in.calls, xml=stand_in.report))
    smi.chmod(0o755)
    stand_in.prints(xml)
    return smi, stand_in


@pytest.fixture
def container(tmp_path: Path) -> StandInSmi:
    return driver_root(tmp_path / "driver-root", IN_PROGRESS)


def stage_context(rack_: tuple, journal: Journal, extravars: dict) -> StageContext:
    inventory, state, environment = rack_
    options = RunOptions(environment=environment, extravars={"nvidia": extravars})
    return StageContext("nvidia", inventory, ["gpu-01", "gpu-02"], journal, state, journal.begin_run("test"), options)


@pytest.fixture
def journal(networked) -> Iterator[Journal]:  # noqa: F811
    with Journal(networked[1]) as opened:
        yield opened


def test_the_host_side_reads_nvidia_smi_in_the_driver_container_through_chroot(networked, tmp_path) -> None:  # noqa: F811
    stand_in = driver_root(tmp_path / "driver-root", COMPLETED)
    environment = EmulatedGpus(networked[2].key, networked[2].port_map)
    extravars = {"nvidia_host_driver_root": str(tmp_path / "driver-root")}
    outcome = run_nvidia(networked, environment, tmp_path, extravars)
    gpu01 = outcome.stages[0].nodes["gpu-01"]
    assert "nvidia-smi in the GPU Operator's driver container: 8 GPU(s), driver 580.95.05" in gpu01["message"]
    assert stand_in.calls.read_text() == "-q -x\n"  # run once, inside the chroot (the script's paths are the root's)
    with Journal(networked[1], readonly=True) as journal:
        facts = journal.latest_facts("gpu-01")["nvidia"]
    verdict = facts["nvidia_host"]
    assert verdict["nvidia_smi_source"] == OPERATOR and len(verdict["gpus_fabric"]) == 8
    assert "nvidia_smi_xml" not in facts["nvidia_host_report"]  # the XML itself is not journalled
    assert facts["nvidia_host_report"]["nvidia_smi"]["command"].startswith("chroot ")


def test_validation_reads_the_fabric_state_again_until_every_gpu_is_registered(
    networked,  # noqa: F811
    journal: Journal,
    container: StandInSmi,
    kube: KubeObjects,
    kubeconfig: Path,
) -> None:
    inventory = networked[0]
    for node in inventory.nodes:
        kube.node(node.hostname, gpus=inventory.gpus_of(node).count)
    ctx = stage_context(networked, journal, {"nvidia_host_driver_root": str(container.report.parent)})
    reader = FabricReader(ctx, ["gpu-01"])
    fabric_manager = threading.Thread(target=lambda: _register_once_read(container), daemon=True)
    fabric_manager.start()
    said: list[str] = []
    polled = poll_read_only(
        inventory,
        Kubectl(kubeconfig),
        {"gpu-01": GpuNodeFacts(nvswitch=SWITCHES)},
        timeout_s=600,
        progress=said.append,
        refresh=reader.refresh,
    )
    fabric_manager.join(timeout=60)
    checks = {(c.name, c.node): c for c in polled.report.checks}
    assert polled.report.ok, polled.report.as_dict()
    assert checks["fabric-manager", "gpu-01"].message == (
        "every GPU registered with Fabric Manager (nvidia-smi in the GPU Operator's driver container, read over SSH "
        "at validation)"
    )
    assert any("fabric-manager gpu-01" in s and "In Progress/Success" in s for s in said), said
    reads = container.count()
    assert reads >= 2 and reader.reads == reads
    reader.refresh({"gpu-01": GpuNodeFacts(nvswitch=SWITCHES)})  # all registered: not read again
    assert container.count() == reads


def _register_once_read(container: StandInSmi) -> None:
    """Stands in for Fabric Manager finishing: once the report was read (In Progress), every GPU is registered.
    Idempotent: writing the completed report again changes nothing."""
    while container.count() < 1:
        threading.Event().wait(0.2)
    container.prints(COMPLETED)


def test_the_hosts_nvidia_smi_comes_first_and_a_node_without_any_says_why(
    networked,  # noqa: F811
    journal: Journal,
    container: StandInSmi,
    tmp_path: Path,
) -> None:
    smi, on_host = host_smi(tmp_path / "host-bin", COMPLETED)
    extravars = {"nvidia_host_driver_root": str(container.report.parent), "nvidia_host_smi_path": str(smi)}
    facts = {n: GpuNodeFacts(nvswitch=SWITCHES) for n in ("gpu-01", "gpu-02")}
    read = FabricReader(stage_context(networked, journal, extravars), ["gpu-01", "gpu-02"]).refresh(facts)
    assert read["gpu-01"].smi is not None and read["gpu-01"].smi_where == (
        "the host's nvidia-smi, read over SSH at validation"
    )
    assert (on_host.count(), container.count()) == (1, 0)
    # gpu-02 serves a host key rackctl never pinned: the play fails there, and the check says so
    assert read["gpu-02"].smi is None and "nvidia_fabric.yml" in str(read["gpu-02"].smi_why)
    assert refused_host_key(read["gpu-02"].smi_why), read["gpu-02"].smi_why

    nothing = {"nvidia_host_driver_root": str(tmp_path / "absent"), "nvidia_host_smi_path": str(tmp_path / "none")}
    read = FabricReader(stage_context(networked, journal, nothing), ["gpu-01"]).refresh(facts)
    assert read["gpu-01"].smi is None and read["gpu-01"].smi_why == (
        f"no nvidia-smi on the node (looked for {tmp_path / 'none'} and {tmp_path / 'absent'}/usr/bin/nvidia-smi): "
        "neither a host driver nor the GPU Operator's driver container is there (yet) (read over SSH at validation)"
    )
