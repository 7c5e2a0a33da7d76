"""The network stage applied for real on the installed lab (two PXE-installed VMs, real sshd, real Ansible).

The head node serves the site the way it does in the lab: the mirror of every role's packages built from
Debian's archive (``build_mirror``), nginx + docker-registry (``LabHeadServices``) with the check image
pushed, and chronyd (``LabTimeServer``), all in the lab's namespace. Then ``rackctl up --stages network``
(the runner, the journal, the lab environment) and, over SSH on each node: /etc/hosts, chrony
synchronised to the head node, the kernel settings, apt seeing only the mirror, containerd pulling an
image from the head node's registry and running it. A second run changes nothing (ansible-runner's recap).
After the stage, on the same nodes: the nvidia stage's host side (role nvidia_host) for real on both VMs,
and the kubernetes stage's (role kubernetes_packages): nothing installed from the mirror, which has no
kubeadm (the install from a mirror that has them runs on the native cluster with the real packages).
Last, ``rackctl driver upgrade`` on the host path across both VMs (stand-in NVIDIA packages, real reboots,
Nodes on the session's real kube-apiserver), then a run that does nothing and one that stops at a version
the sources lack.

The lab, its site services and the network stage's first run are session fixtures
(``tests/installed_lab.py``), shared with the other VM modules on the installed lab.

Runs VMs: only under ``flock /tmp/rackctl-lab.lock`` (the ``installed_lab`` fixture takes it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.base import RunOptions, StageContext, StageResult, get_stage
from bootstrap.stages.playbook import runs_dir
from bootstrap.stages.runner import EXIT_NOT_APPLIED, Runner, select
from tests.installed_lab import InstalledLab, ServedLab, failed_nodes
from tests.timing import VM_PLAYBOOK_S, seconds

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_the_stage_succeeds_on_every_node_and_the_journal_says_so(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    stage = first_run.stages[0]
    assert first_run.ok, failed_nodes(first_run)
    assert stage.name == "network" and stage.status == "completed"
    with Journal(lab.state_dir, readonly=True) as journal:
        for node in lab.nodes:
            assert stage.nodes[node]["status"] == "completed" and stage.nodes[node]["changed"]
            assert journal.stage_done(node, "network") is not None
            assert journal.state(node) is NodeState.PROVISIONED  # kubernetes moves them to joined
            # role container_runtime read back the containerd the node runs: the one the node itself names
            said = lab.ssh(node, "containerd --version").stdout.strip()
            report = journal.latest_facts(node)["network"]["container_runtime_report"]
            assert report["said"] == said and report["containerd"] in said, (report, said)
            assert stage.nodes[node]["message"].startswith(f"containerd {report['containerd']}"), stage.nodes[node]
    assert (runs_dir(lab.state_dir) / f"{first_run.run_id}-network" / "artifacts").is_dir()
    print(f"timings: {lab.timings} {served_lab.timings}")


def test_names_resolve_to_the_inventory_addresses(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    for node in lab.nodes:
        assert lab.ssh(node, "hostname").stdout.strip() == node
        for other in lab.inventory.nodes:
            want = str(other.address_on("management"))
            got = lab.ssh(node, f"getent hosts {other.hostname}.{lab.inventory.cluster.domain}").stdout.split()
            assert got[0] == want and other.hostname in got, got


def test_chrony_is_synchronised_to_the_head_node(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    for node in lab.nodes:
        # waits up to 90 s (90 tries, 1 s apart) for chrony to select a source and be synchronised
        lab.ssh(node, "chronyc waitsync 90 0 0 1", timeout=120)
        tracking = lab.ssh(node, "chronyc -n tracking").stdout
        assert f"({served_lab.head_ip})" in tracking, tracking
        assert "Leap status     : Normal" in tracking, tracking
        sources = lab.ssh(node, "chronyc -n sources").stdout
        assert f"^* {served_lab.head_ip}" in sources, sources


def test_kernel_settings_and_swap(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    for node in lab.nodes:
        values = lab.ssh(
            node, "sysctl -n net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"
        ).stdout.split()
        assert values == ["1", "1", "1"]
        modules = lab.ssh(node, "cat /proc/modules").stdout
        assert "br_netfilter " in modules and "overlay " in modules
        assert lab.ssh(node, "cat /proc/swaps").stdout.strip().splitlines()[1:] == []
        assert lab.ssh(node, "cat /etc/timezone").stdout.strip() == lab.inventory.cluster.timezone


def test_apt_sees_only_the_head_nodes_mirror(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    mirror = served_lab.mirror_uri.rstrip("/")
    for node in lab.nodes:
        policy = lab.ssh(node, "apt-cache policy").stdout
        sources = [line.split()[1] for line in policy.splitlines() if " http" in line]
        assert sources and all(s == mirror for s in sources), policy
        chrony = lab.ssh(node, "apt-cache policy chrony").stdout
        assert "Installed: (none)" not in chrony and mirror in chrony, chrony
    # the packages came over the head node's nginx (the roles' installs, e.g. containerd's .deb: baseline's,
    # chrony among them, are in the image already, bootstrap.provision.image.IMAGE_ROLES)
    assert "/pool/main/c/containerd/containerd_" in served_lab.mirror_log.read_text()


def test_containerd_pulls_from_the_head_registry_and_runs_it(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    image = served_lab.check_image
    assert image.startswith(served_lab.registry + "/")
    for node in lab.nodes:
        dump = lab.ssh(node, "containerd config dump").stdout
        assert "SystemdCgroup = true" in dump and 'config_path = "/etc/containerd/certs.d"' in dump
        lab.ssh(node, f"ctr -n rackctl-test images pull --hosts-dir /etc/containerd/certs.d {image}", timeout=180)
        out = lab.ssh(node, f"ctr -n rackctl-test run --rm {image} t-{node} /bin/echo hello-from-{node}", timeout=120)
        assert out.stdout.strip() == f"hello-from-{node}"
        lab.ssh(node, f"ctr -n rackctl-test images rm {image}")


def run_stage_directly(served_lab: ServedLab, stage: str, timing: str, nodes: list[str] | None = None) -> StageResult:
    """Run ``stage`` itself on ``nodes`` (default every lab node; no runner: the journal moves no node),
    timed as ``timing``."""
    lab = served_lab.lab
    nodes = list(lab.nodes) if nodes is None else nodes
    start = time.monotonic()
    with Journal(lab.state_dir) as journal:
        run_id = journal.begin_run(f"test: {stage} stage again")
        options = RunOptions(environment=lab.environment)
        ctx = StageContext(stage, lab.inventory, nodes, journal, lab.state_dir, run_id, options=options)
        result = get_stage(stage).run(ctx)
    served_lab.timings[timing] = time.monotonic() - start
    return result


def test_a_second_run_changes_nothing_on_a_node_the_first_run_configured(served_lab: ServedLab, first_run) -> None:
    """Idempotence, proven once on the cheapest node that shows it: one worker, not every host. The roles
    run the same tasks on each worker (the first run configured both, and the tests above check both), so a
    second host adds TCG minutes, not coverage (measured: 482 s on both workers, see the README)."""
    lab = served_lab.lab
    node = lab.nodes[0]
    result = run_stage_directly(served_lab, "network", "second_run_s", nodes=[node])
    print(f"timings: {served_lab.timings}")
    assert result.ok, result
    assert set(result.nodes) == {node}, result.nodes
    data = result.nodes[node].data
    # data["changed"] is ansible-runner's recap (PlaybookResult.changed_by_host)
    assert data["changed"] == 0 and data["changed_tasks"] == [], (node, data)
    assert not result.nodes[node].changed


def test_the_molecule_scenarios_pass_against_the_lab_nodes(served_lab: ServedLab, first_run) -> None:
    """``scripts/molecule.sh`` against the same nodes: the verify of container_runtime's and baseline's scenarios."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("molecule") is None:
        pytest.skip("molecule is not installed (the test extra)")
    lab = served_lab.lab
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "RACKCTL_STATE_DIR": str(lab.state_dir),
        "RACKCTL_LAB_DIR": str(lab.lab_dir),
        "RACKCTL_INVENTORY": str(lab.inventory_path),
        "RACKCTL_ENV": "lab",
        "RACKCTL_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    script = str(root / "scripts" / "molecule.sh")
    start = time.monotonic()
    # CI time: each scenario's verify against the nodes the stage converged; the stage's first run is the
    # converge and its second run the idempotence check (`make molecule` runs the whole scenarios)
    verify = subprocess.run(
        [script, "container_runtime", "baseline"],
        env={**env, "RACKCTL_MOLECULE_COMMAND": "verify"},
        capture_output=True,
        text=True,
        timeout=seconds(VM_PLAYBOOK_S),
        check=False,
    )
    served_lab.timings["molecule_s"] = time.monotonic() - start
    print(f"timings: {served_lab.timings}")
    assert verify.returncode == 0, verify.stdout[-6000:] + verify.stderr[-3000:]
    # molecule logs each action (scenario ➜ action) on stderr and its summary on stdout
    for role in ("container_runtime", "baseline"):  # molecule.sh announces each role it runs (set -e between)
        assert f"== molecule verify: role {role}" in verify.stdout, verify.stdout[-3000:]
    assert "verify" in verify.stderr + verify.stdout and "idempotence" not in verify.stderr, verify.stderr[-3000:]


def test_after_it_the_nvidia_stage_runs_its_host_side_on_the_gpu_vms(served_lab: ServedLab, first_run) -> None:
    """``up --stages nvidia``: nouveau blacklisted in the VMs' initramfs, their real PCI bus read back (no
    GPU, no NVSwitch: a lab VM, said so), the GPU Operator only rendered: exit 5, no node moved."""
    lab = served_lab.lab
    selection = select(lab.inventory, stages=["nvidia"], limit=lab.nodes)
    start = time.monotonic()
    outcome = Runner(lab.inventory, lab.state_dir, selection, options=RunOptions(environment=lab.environment)).run()
    served_lab.timings["nvidia_host_s"] = time.monotonic() - start
    print(f"timings: {served_lab.timings}")
    assert outcome.exit_code == EXIT_NOT_APPLIED, outcome.as_dict()
    stage = outcome.stages[0]
    with Journal(lab.state_dir, readonly=True) as journal:
        for node in lab.nodes:
            result = stage.nodes[node]
            assert result["status"] == "rendered" and "host side applied" in result["message"], result
            assert "0 NVIDIA GPU(s) on the PCI bus" in result["message"] and "a lab VM" in result["message"]
            assert journal.state(node) is NodeState.PROVISIONED
            facts = journal.latest_facts(node)["nvidia"]
            assert facts["nvidia_host"]["gpus_found"] == 0 and not facts["nvidia_host"]["needs_fabric_manager"]
            assert any("/vendor:0x1af4" in line for line in facts["nvidia_host_report"]["pci_sysfs"])  # virtio
            initramfs = lab.ssh(node, "lsinitramfs /boot/initrd.img-$(uname -r)", timeout=120).stdout
            assert "rackctl-blacklist-nouveau.conf" in initramfs
    assert "Fabric Manager not needed (XE9680 would have them" in stage.nodes["gpu-02"]["message"]


#: Shell (a ``str.format`` template, as the builds below): index the .deb files in {repo} as a flat apt
#: repository and make it the node's one trusted source {sources}, then read it.
FLAT_REPO_INDEX = r"""cd {repo}
for f in *.deb; do
  dpkg-deb -f $f
  echo "Filename: ./$f"
  echo "Size: $(stat -c %s $f)"
  echo "SHA256: $(sha256sum $f | cut -d' ' -f1)"
  echo
done > Packages
{{ echo "Date: $(date -Ru)"; echo "SHA256:"
   echo " $(sha256sum Packages | cut -d' ' -f1) $(stat -c %s Packages) Packages"; }} > Release
printf 'Types: deb\nURIs: file:{repo}/\nSuites: ./\nTrusted: yes\n' > {sources}
apt-get -qq update
"""


def test_after_it_the_kubernetes_stage_says_the_mirror_lacks_the_packages_and_changes_nothing(
    served_lab: ServedLab, first_run
) -> None:
    """``up --stages kubernetes``: the lab's mirror (Debian bookworm; ``inventory/lab.yml`` turns the
    Kubernetes upstream off) has no kubeadm/kubelet, so nothing changes and each node says so (exit 5). The
    install from a mirror that has them, the holds, a second run, the wait for dpkg's lock and the refusal of
    another kubelet run with the real packages on the native cluster
    (tests/ansible/test_kubernetes_cluster_real.py)."""
    lab = served_lab.lab
    selection = select(lab.inventory, stages=["kubernetes"], limit=lab.nodes)
    start = time.monotonic()
    outcome = Runner(lab.inventory, lab.state_dir, selection, options=RunOptions(environment=lab.environment)).run()
    served_lab.timings["kubernetes_missing_s"] = time.monotonic() - start
    assert outcome.exit_code == EXIT_NOT_APPLIED, outcome.as_dict()
    for node in lab.nodes:
        result = outcome.stages[0].nodes[node]
        assert result["status"] == "rendered" and "host side applied (0 changed)" in result["message"], result
        assert (
            "not installed: the node's package sources (the head node's mirror) have no kubeadm/kubelet"
            in (result["message"])
        )
        assert "kubeadm" not in lab.ssh(node, "dpkg --get-selections").stdout
        with Journal(lab.state_dir, readonly=True) as journal:
            assert journal.state(node) is NodeState.PROVISIONED  # not joined


#: The host-driver upgrade's throwaway flat apt repository, built ON the VMs like the one above: STAND-INS
#: named cuda-drivers-580 and nvidia-fabricmanager-580 at two versions, because there is no GPU here and no
#: NVIDIA package can be fetched. They carry no driver. The stand-in driver package ships a stand-in
#: `nvidia-smi` that prints, once per (stand-in) GPU, the version of cuda-drivers-580 that was installed when
#: the node booted (a boot-time unit writes it under /run, as loading the kernel module would): like the real
#: one, it reports the new version only after the reboot. The stand-in Fabric Manager is a service that
#: sleeps. What is real: apt resolving the exact version from the node's sources (or refusing), the install,
#: the holds, the reboot (boot id), the cordon/drain/uncordon on a real kube-apiserver, the journal.
DRIVER_V0, DRIVER_V, DRIVER_MISSING = "580.95.05", "580.105.08", "580.126.09"
DRIVER_PKG, FM_PKG = "cuda-drivers-580", "nvidia-fabricmanager-580"
DRIVER_REPO = "/srv/rackctl-standin-nvidia"
DRIVER_SOURCES = "/etc/apt/sources.list.d/standin-nvidia.sources"
DRIVER_BUILD = (
    r"""set -e
rm -rf {repo} /tmp/standin-nv && mkdir -p {repo} /tmp/standin-nv
build() {{  # package version
  root=/tmp/standin-nv/$1-$2
  mkdir -p $root/DEBIAN $root/usr/share/doc/$1 $root/usr/lib/systemd/system
  echo "STAND-IN $1 $2: a rackctl lab test's package, not NVIDIA's (no GPU here)" > $root/usr/share/doc/$1/STAND-IN
  {{ echo "Package: $1"; echo "Version: $2"; echo "Architecture: all"
     echo "Maintainer: rackctl tests <tests@rackctl.test>"
     echo "Description: STAND-IN $1 (rackctl lab test: no GPU and no NVIDIA package here)"
  }} > $root/DEBIAN/control
  case $1 in
  cuda-drivers-*)
    mkdir -p $root/usr/bin $root/usr/lib/standin-nvidia $root/usr/lib/systemd/system/multi-user.target.wants
    cat > $root/usr/bin/nvidia-smi <<'SMI'
#!/bin/sh
# STAND-IN nvidia-smi (rackctl lab test, no GPU): answers only --query-gpu=driver_version --format=csv,noheader,
# with the driver version "loaded" at boot (standin-nvidia-driver.service), once per stand-in GPU
[ "$1 $2" = "--query-gpu=driver_version --format=csv,noheader" ] || {{ echo "stand-in nvidia-smi: $*" >&2; exit 2; }}
v=$(cat /run/standin-nvidia/driver_version 2>/dev/null) || {{
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver (STAND-IN)" >&2; exit 9; }}
echo "$v"; echo "$v"
SMI
    chmod 0755 $root/usr/bin/nvidia-smi
    cat > $root/usr/lib/standin-nvidia/load <<LOAD
#!/bin/sh
# STAND-IN driver load (rackctl lab test): records the installed version at boot, as a loaded module would
mkdir -p /run/standin-nvidia
dpkg-query -W -f='\${{Version}}' $1 | sed 's/-[^-]*\$//' > /run/standin-nvidia/driver_version
LOAD
    chmod 0755 $root/usr/lib/standin-nvidia/load
    cat > $root/usr/lib/systemd/system/standin-nvidia-driver.service <<'UNIT'
[Unit]
Description=STAND-IN NVIDIA driver load (rackctl lab test)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/standin-nvidia/load
[Install]
WantedBy=multi-user.target
UNIT
    ln -s ../standin-nvidia-driver.service $root/usr/lib/systemd/system/multi-user.target.wants/ ;;
  *)
    cat > $root/usr/lib/systemd/system/nvidia-fabricmanager.service <<'UNIT'
[Unit]
Description=STAND-IN NVIDIA Fabric Manager (rackctl lab test, no NVSwitch)
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
UNIT
    ;;
  esac
  dpkg-deb -Zgzip --root-owner-group --build $root {repo}/$1_$2_all.deb >/dev/null
}}
for v in {v0} {v}; do build {driver} $v-1; build {fm} $v-1; done
"""
    + FLAT_REPO_INDEX
    + r"""# the node as an earlier install left it: the old driver installed, held and loaded (as at boot)
apt-get -qq install -y {packages} >/dev/null
apt-mark hold {names} >/dev/null
systemctl daemon-reload && systemctl start standin-nvidia-driver.service
{fm_start}
"""
)
DRIVER_CLEANUP = (
    f"apt-mark unhold {DRIVER_PKG} {FM_PKG} >/dev/null 2>&1; "
    "systemctl disable --now nvidia-fabricmanager >/dev/null 2>&1; "
    f"dpkg --purge {DRIVER_PKG} {FM_PKG} >/dev/null 2>&1; systemctl daemon-reload; "
    f"rm -rf {DRIVER_REPO} {DRIVER_SOURCES} /tmp/standin-nv /run/standin-nvidia; apt-get -qq update"
)


def _driver_build(lab: InstalledLab, node: str, fabric_manager: bool) -> None:
    names = [DRIVER_PKG, FM_PKG] if fabric_manager else [DRIVER_PKG]
    script = DRIVER_BUILD.format(
        repo=DRIVER_REPO,
        sources=DRIVER_SOURCES,
        driver=DRIVER_PKG,
        fm=FM_PKG,
        v0=DRIVER_V0,
        v=DRIVER_V,
        packages=" ".join(f"{n}={DRIVER_V0}-1" for n in names),
        names=" ".join(names),
        fm_start="systemctl enable --now nvidia-fabricmanager" if fabric_manager else "",
    )
    lab.ssh(node, script, timeout=300)


def _boot_id(lab: InstalledLab, node: str) -> str:
    return lab.ssh(node, "cat /proc/sys/kernel/random/boot_id").stdout.strip()


def _driver_state(lab: InstalledLab, node: str, packages: list[str]) -> dict[str, object]:
    """What the node has, read over SSH: each package's version and selection, and the stand-in nvidia-smi."""
    query = lab.ssh(node, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Want}\\n' " + " ".join(packages))
    found = {line.split()[0]: tuple(line.split()[1:]) for line in query.stdout.splitlines() if line.strip()}
    smi = lab.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()
    return {"packages": found, "smi": smi}


def test_after_it_a_host_driver_upgrade_rolls_through_the_gpu_vms_and_stops_at_a_missing_version(
    served_lab: ServedLab, first_run, kube, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``driver upgrade`` on the host path (the test's copy of the lab inventory says ``gpu_driver: host``),
    against the VMs with the stand-in packages above and a real kube-apiserver whose Nodes the test creates
    through the API (named like the lab's GPU VMs; no kubelet runs, so their Ready condition is written by
    the test). One: both GPU nodes in one batch (--max-unavailable 2): each cordoned and drained while its
    upgrade runs, driver (and Fabric Manager on the XE9680) at exactly V, held, rebooted (boot id), V on
    the stand-in nvidia-smi, uncordoned. Two (the CLI): nothing to do, nothing touched, no reboot. Three
    (the CLI): a version the nodes' sources lack: the first node of batch 1 refuses with no change, stays
    cordoned with the record saying so, and the rollout stops before batch 2."""
    import json
    import shutil
    import threading

    import yaml
    from click.testing import CliRunner

    from bootstrap.cli import cli
    from bootstrap.day2.driver import plan_upgrade
    from bootstrap.day2.driver_host import AnsibleDriverNodes, HostDriverRollout
    from bootstrap.inventory import load_inventory
    from bootstrap.kube import ClusterGate, Kubectl
    from bootstrap.rollout import RolloutPolicy

    lab = served_lab.lab
    data = yaml.safe_load(lab.inventory_path.read_text())
    data["cluster"]["gpu_driver"] = "host"
    inventory_path = lab.inventory_path.with_name("lab-driver-host.yml")  # beside lab.yml: same ../.lab paths
    inventory_path.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = load_inventory(inventory_path)
    fm_nodes = {n for n in lab.nodes if (hw := inventory.hardware(inventory.node(n).model)) and hw.fabric_manager}
    assert fm_nodes == {"gpu-02"}  # the XE9680
    packages = {n: [DRIVER_PKG, FM_PKG] if n in fm_nodes else [DRIVER_PKG] for n in lab.nodes}
    for node in lab.nodes:  # through the API: no kubelet runs here
        kube.node(node, gpus=inventory.gpus_of(inventory.node(node)).count)
    kube_copy = lab.state_dir / "kubeconfig"
    started = time.monotonic()
    try:
        threads = [threading.Thread(target=_driver_build, args=(lab, n, n in fm_nodes)) for n in lab.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for node in lab.nodes:
            state = _driver_state(lab, node, packages[node])
            assert state["packages"] == dict.fromkeys(packages[node], (f"{DRIVER_V0}-1", "hold")), state
            assert state["smi"] == [DRIVER_V0, DRIVER_V0], state
        served_lab.timings["driver_standin_s"] = time.monotonic() - started
        boots = {n: _boot_id(lab, n) for n in lab.nodes}

        # -- one: the upgrade, both nodes in one batch -------------------------------------------------
        plan = plan_upgrade(inventory, DRIVER_V, max_unavailable=2)
        assert plan.path == "host" and plan.batches == [lab.nodes]
        cordoned_during: dict[str, bool] = {}

        def on_event(kind: str, node: str, text: str) -> None:
            if kind == "upgrade":  # the role starts now: what the API server says of the Node
                cordoned_during[node] = bool(kube.get_node(node)["spec"].get("unschedulable"))

        start = time.monotonic()
        with Journal(lab.state_dir) as journal:
            run_id = journal.begin_run("test: driver upgrade, host path")
            report = HostDriverRollout(
                inventory,
                plan,
                journal,
                run_id,
                nodes=AnsibleDriverNodes(inventory, lab.state_dir, lab.environment, DRIVER_V, run_id),
                gate=ClusterGate(Kubectl(kubeconfig)),
                policy=RolloutPolicy(max_unavailable=2),
                on_event=on_event,
            ).run()
            steps = [(s.node, s.step, s.status, s.detail) for s in journal.steps(run_id=run_id)]
            states = {n: journal.state(n) for n in lab.nodes}
        served_lab.timings["driver_upgrade_s"] = time.monotonic() - start
        print("driver upgrade:", {o.node: o.records.get("reboot") for o in report.nodes})  # "rebooted in N s"
        assert report.ok, report.as_dict()
        assert [list(b.nodes) for b in report.batches] == [lab.nodes]
        assert cordoned_during == dict.fromkeys(lab.nodes, True)
        for outcome in report.nodes:
            node = outcome.node
            assert outcome.status == "done" and outcome.cordon == "uncordoned", outcome.as_dict()
            assert outcome.records["cordon"] == "cordoned and drained"
            assert outcome.records["reboot"].startswith("rebooted"), outcome.records
            assert outcome.before["running"] == [DRIVER_V0] and outcome.after["running"] == [DRIVER_V]
            assert not kube.get_node(node)["spec"].get("unschedulable")
            state = _driver_state(lab, node, packages[node])
            assert state["packages"] == dict.fromkeys(packages[node], (f"{DRIVER_V}-1", "hold")), state
            assert state["smi"] == [DRIVER_V, DRIVER_V], state
            now = _boot_id(lab, node)
            assert now != boots[node], "the node did not reboot"
            boots[node] = now
            assert states[node] is NodeState.PROVISIONED  # back from maintenance
            mine = [(step, status) for n, step, status, _d in steps if n == node]
            assert mine == [
                ("read", "completed"),
                ("cordon", "started"),
                ("cordon", "completed"),
                (f"upgrade:{DRIVER_V}", "started"),
                (f"upgrade:{DRIVER_V}", "completed"),
                ("uncordon", "started"),
                ("uncordon", "completed"),
            ], mine
        fm = lab.ssh("gpu-02", "systemctl is-active nvidia-fabricmanager && systemctl is-enabled nvidia-fabricmanager")
        assert fm.stdout.split() == ["active", "enabled"]

        # -- two: the same version again through the CLI: nothing to do, nothing touched ----------------
        shutil.copy(kubeconfig, kube_copy)  # the kubernetes stage's contract: <state-dir>/kubeconfig
        monkeypatch.setenv("RACKCTL_LAB_DIR", str(lab.lab_dir))
        argv = ["driver", "upgrade", "-i", str(inventory_path), "--state-dir", str(lab.state_dir), "--json"]
        start = time.monotonic()
        again = CliRunner().invoke(cli, [*argv, "--version", DRIVER_V])
        served_lab.timings["driver_again_s"] = time.monotonic() - start
        assert again.exit_code == 0, again.output
        result = json.loads(again.stdout)
        assert result["applied"] and result["batches"] == []
        for outcome in result["nodes"]:
            assert outcome["status"] == "nothing-to-do" and outcome["cordon"] == "not touched", outcome
            assert [s["step"] for s in outcome["steps"]] == ["read"]
        for node in lab.nodes:
            assert _boot_id(lab, node) == boots[node]  # no reboot
        with Journal(lab.state_dir, readonly=True) as journal:
            assert {s.step for s in journal.steps(run_id=result["run"])} == {"read"}

        # -- three: a version the nodes' sources lack: batch 1 fails, is left cordoned, the rollout stops -
        start = time.monotonic()
        missing = CliRunner().invoke(cli, [*argv, "--version", DRIVER_MISSING])
        served_lab.timings["driver_missing_s"] = time.monotonic() - start
        print(f"timings: {served_lab.timings}")
        assert missing.exit_code == 1, missing.output
        result = json.loads(missing.stdout)
        first, second = (next(o for o in result["nodes"] if o["node"] == n) for n in lab.nodes)
        assert result["stopped"] and "failure threshold 1" in result["reason"], result["reason"]
        assert first["status"] == "failed" and first["cordon"] == "left cordoned", first
        assert f"no {DRIVER_PKG} at {DRIVER_MISSING}" in first["message"], first["message"]
        assert "nothing was changed" in first["message"]
        assert first["records"]["uncordon"].startswith("left cordoned:")
        assert second["status"] == "pending" and "the rollout stopped" in second["message"], second
        assert second["cordon"] == "not touched"
        assert kube.get_node(lab.nodes[0])["spec"].get("unschedulable") is True
        assert not kube.get_node(lab.nodes[1])["spec"].get("unschedulable")
        for node in lab.nodes:
            assert _boot_id(lab, node) == boots[node]  # refused before any change: no reboot
            state = _driver_state(lab, node, packages[node])
            assert state["packages"] == dict.fromkeys(packages[node], (f"{DRIVER_V}-1", "hold")), state
        with Journal(lab.state_dir, readonly=True) as journal:
            assert journal.state(lab.nodes[0]) is NodeState.MAINTENANCE
            assert journal.history(lab.nodes[0])[-1].cause == f"driver rollout to {DRIVER_MISSING}, batch 1"
            left = journal.last_step(lab.nodes[0], "driver", "uncordon")
            assert left is not None and left.detail["gate"].startswith("left cordoned:"), left
            assert journal.state(lab.nodes[1]) is NodeState.PROVISIONED
            assert {s.step for s in journal.steps(run_id=result["run"], node=lab.nodes[1])} == {"read"}
    finally:
        served_lab.timings["driver_total_s"] = time.monotonic() - started
        print(f"timings: {served_lab.timings}")
        kube_copy.unlink(missing_ok=True)
        inventory_path.unlink(missing_ok=True)
        with Journal(lab.state_dir) as journal:  # give the nodes back as the later tests expect them
            for node in lab.nodes:
                status = journal.nodes().get(node)
                if status is not None and status.state is NodeState.MAINTENANCE:
                    back = status.left_from() or NodeState.PROVISIONED
                    journal.transition(node, back, "test: the driver upgrade test gives the node back")
        cleanups = [
            threading.Thread(target=lab.ssh, args=(n, DRIVER_CLEANUP), kwargs={"check": False, "timeout": 180})
            for n in lab.nodes
        ]
        for thread in cleanups:
            thread.start()
        for thread in cleanups:
            thread.join()
