"""The network stage applied for real on the installed lab (two PXE-installed VMs, real sshd, real Ansible).

The head node serves the site the way it does in the lab: the mirror of every role's packages built from
Debian's archive (``build_mirror``), nginx + docker-registry (``LabHeadServices``) with the check image
pushed, and chronyd (``LabTimeServer``), all in the lab's namespace. Then ``rackctl up --stages network``
(the runner, the journal, the lab environment) and, over SSH on each node: /etc/hosts, chrony
synchronised to the head node, the kernel settings, apt seeing only the mirror, containerd pulling an
image from the head node's registry and running it. A second run changes nothing (ansible-runner's recap).
After the stage, on the same nodes: the nvidia stage's host side (role nvidia_host) for real on both VMs,
and the kubernetes stage's (role kubernetes_packages): nothing installed from the mirror, which has no
kubeadm, then install, hold and refusal with stand-in packages built on the VMs (see ``STANDIN_BUILD``).

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
from tests.inband.conftest import ServedLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_the_stage_succeeds_on_every_node_and_the_journal_says_so(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    stage = first_run.stages[0]
    assert first_run.ok, first_run.as_dict()
    assert stage.name == "network" and stage.status == "completed"
    with Journal(lab.state_dir, readonly=True) as journal:
        for node in lab.nodes:
            assert stage.nodes[node]["status"] == "completed" and stage.nodes[node]["changed"]
            assert journal.stage_done(node, "network") is not None
            assert journal.state(node) is NodeState.PROVISIONED  # kubernetes moves them to joined
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
    # the packages came over the head node's nginx (the roles' installs, e.g. chrony's .deb)
    assert "/pool/main/c/chrony/chrony_" in served_lab.mirror_log.read_text()


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


def run_stage_directly(served_lab: ServedLab, stage: str, timing: str) -> StageResult:
    """Run ``stage`` itself on every lab node (no runner: the journal moves no node), timed as ``timing``."""
    lab = served_lab.lab
    start = time.monotonic()
    with Journal(lab.state_dir) as journal:
        run_id = journal.begin_run(f"test: {stage} stage again")
        options = RunOptions(environment=lab.environment)
        ctx = StageContext(stage, lab.inventory, list(lab.nodes), journal, lab.state_dir, run_id, options=options)
        result = get_stage(stage).run(ctx)
    served_lab.timings[timing] = time.monotonic() - start
    return result


def test_a_second_run_changes_nothing_on_any_host(served_lab: ServedLab, first_run) -> None:
    lab = served_lab.lab
    result = run_stage_directly(served_lab, "network", "second_run_s")
    print(f"timings: {served_lab.timings}")
    assert result.ok, result
    for node in lab.nodes:
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
        timeout=900,
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


#: A throwaway flat apt repository the test builds ON the VMs: STAND-INS named kubeadm/kubelet/kubectl,
#: because no Kubernetes package can be fetched here (Debian has none; pkgs.k8s.io is not reachable). They
#: carry no Kubernetes: the stand-in kubeadm only answers `kubeadm config validate --config FILE` by
#: checking that FILE names a kubeadm API, and says so in its output. What is real: apt resolving
#: `<version>-*` from the node's sources, the install, the holds, the refusal, the role's idempotence.
PACKAGES = ("kubeadm", "kubelet", "kubectl")
STANDIN_REPO = "/srv/rackctl-standin-kubernetes"
STANDIN_SOURCES = "/etc/apt/sources.list.d/standin-kubernetes.sources"
STANDIN_BUILD = r"""set -e
rm -rf {repo} /tmp/standin && mkdir -p {repo} /tmp/standin/bin
cat > /tmp/standin/bin/kubeadm <<'KUBEADM'
#!/bin/sh
# STAND-IN kubeadm (rackctl lab test): answers only `kubeadm config validate --config FILE`
[ "$1 $2 $3" = "config validate --config" ] || exit 1
grep -q "^apiVersion: kubeadm.k8s.io/" "$4" || exit 1
echo "stand-in kubeadm: $4 names a kubeadm API, not validated by a real kubeadm"
KUBEADM
build() {{  # package version folder
  root=/tmp/standin/$1-$2
  mkdir -p $root/DEBIAN $root/usr/bin $root/usr/share/doc/$1
  echo "STAND-IN $1 $2: a rackctl lab test's package, not Kubernetes" > $root/usr/share/doc/$1/STAND-IN
  {{ echo "Package: $1"; echo "Version: $2"; echo "Architecture: all"
     echo "Maintainer: rackctl tests <tests@rackctl.test>"
     echo "Description: STAND-IN $1 (rackctl lab test: no Kubernetes package can be fetched here)"
  }} > $root/DEBIAN/control
  if [ $1 = kubeadm ]; then install -m 0755 /tmp/standin/bin/kubeadm $root/usr/bin/kubeadm; fi
  dpkg-deb -Zgzip --root-owner-group --build $root $3/$1_$2_all.deb >/dev/null
}}
for p in kubeadm kubelet kubectl; do build $p {version} {repo}; done
build kubelet {older} /tmp/standin
cd {repo}
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
STANDIN_CLEANUP = (
    "apt-mark unhold kubeadm kubelet kubectl >/dev/null 2>&1; dpkg --purge kubeadm kubelet kubectl >/dev/null 2>&1; "
    f"rm -rf {STANDIN_REPO} {STANDIN_SOURCES} /tmp/standin /etc/rackctl/kubeadm.yaml; "
    "rmdir --ignore-fail-on-non-empty /etc/rackctl; apt-get -qq update"
)


def test_after_it_the_kubernetes_stage_pins_and_holds_the_packages_where_the_sources_have_them(
    served_lab: ServedLab, first_run
) -> None:
    """``up --stages kubernetes``: the lab mirror (Debian bookworm) has no kubeadm/kubelet, so nothing changes
    and each node says so (exit 5). Then, with the stand-in repository above on the VMs: kubeadm/kubelet/kubectl
    at exactly the inventory's version installed and held, the node's kubeadm config put on it and handed to
    (the stand-in) kubeadm; a second run changes nothing, and a node with another kubelet held is refused."""
    lab = served_lab.lab
    version = lab.inventory.cluster.resolved_versions().kubernetes
    major, minor, patch = version.split(".")
    older = f"{major}.{minor}.{int(patch) - 1 if int(patch) else 0}-1.1" if int(patch) else f"{major}.{minor}.0-0.1"
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
    try:
        for node in lab.nodes:
            build = STANDIN_BUILD.format(
                repo=STANDIN_REPO, version=f"{version}-1.1", older=older, sources=STANDIN_SOURCES
            )
            lab.ssh(node, build, timeout=180)
        start = time.monotonic()
        outcome = Runner(lab.inventory, lab.state_dir, selection, options=RunOptions(environment=lab.environment)).run()
        served_lab.timings["kubernetes_install_s"] = time.monotonic() - start
        assert outcome.exit_code == EXIT_NOT_APPLIED, outcome.as_dict()  # init/join are not built
        with Journal(lab.state_dir, readonly=True) as journal:
            for node in lab.nodes:
                result = outcome.stages[0].nodes[node]
                assert result["status"] == "rendered", result
                assert (
                    f"kubeadm/kubelet/kubectl {version} installed and held (kubeadm {version}-1.1"
                    in (result["message"])
                )
                assert (
                    "kubeadm config validate --config /etc/rackctl/kubeadm.yaml passed on the node"
                    in (result["message"])
                )
                assert "not validated by a real kubeadm" in result["message"]  # the stand-in says what it is
                held = lab.ssh(node, "dpkg --get-selections kubeadm kubelet kubectl").stdout.split()
                assert dict(zip(held[::2], held[1::2], strict=True)) == dict.fromkeys(PACKAGES, "hold"), held
                versions = lab.ssh(node, "dpkg-query -W -f '${Version} ' kubeadm kubelet kubectl").stdout.split()
                assert versions == [f"{version}-1.1"] * 3, versions
                config = lab.ssh(node, "cat /etc/rackctl/kubeadm.yaml").stdout
                assert config == (lab.state_dir / "cluster" / "kubeadm" / f"{node}.yaml").read_text()
                report = journal.latest_facts(node)["kubernetes"]["kubernetes_packages_report"]
                assert report["held"] and report["missing"] == [] and report["config_validated"]
                assert journal.state(node) is NodeState.PROVISIONED  # not joined: init/join are not built

        # another kubelet, held, on the second node: refused there; the first changes nothing on a second run
        other = lab.nodes[1]
        lab.ssh(
            other, f"apt-mark unhold kubelet && dpkg -i /tmp/standin/kubelet_{older}_all.deb && apt-mark hold kubelet"
        )
        result = run_stage_directly(served_lab, "kubernetes", "kubernetes_again_s")
        print(f"timings: {served_lab.timings}")
        first = result.nodes[lab.nodes[0]]
        assert first.ok and "host side applied (0 changed)" in first.message, first
        refused = result.nodes[other]
        assert not refused.ok and f"kubelet {older} (hold) installed" in refused.message, refused
        assert f"Kubernetes version is {version}" in refused.message and "does not upgrade" in refused.message
        assert not result.ok
        assert lab.ssh(other, "dpkg-query -W -f '${Version}' kubelet").stdout == older  # left as it was
    finally:
        for node in lab.nodes:
            lab.ssh(node, STANDIN_CLEANUP, check=False, timeout=180)
