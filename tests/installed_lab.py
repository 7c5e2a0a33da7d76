"""THE installed lab of the session: one ``installed_lab`` (``inventory/lab.yml``, really installed), shared.

``lab up`` (emulated iDRACs, libvirt VMs under qemu TCG with the inventory's NICs on one bridge per
network, in the lab's network namespace), then the two worker VMs installed through the product's own
provisioning path (:class:`bootstrap.provision.flow.ProvisionSession`: one-time PXE, the deploy ramdisk
streaming the debootstrap image, callback, pinned SSH host keys, DMI identity), journalled as
``provisioned``. Tests get an :class:`InstalledLab`: the inventory, state dir, lab dir, the
:class:`~rackctl_lab.environment.LabEnvironment`, the provisioning session's runs and logs, and
:meth:`InstalledLab.ssh` to run a command on a node over SSH the way the rendered Ansible inventory
reaches it (pinned known_hosts, admin key, netns relay).

Paid once per session (a plugin of the root conftest): every VM test that does not test installing
itself works on these nodes; ``tests/provision/test_e2e_lab.py`` asserts on this very install, and
``tests/day2/test_redeploy_vm.py`` reinstalls one of them last. So that
no other lab's VMs run beside it, :func:`pytest_collection_modifyitems` moves the modules that use it to
the end of the run (their order kept), and marks their tests ``vm``. The fixture runs under the
machine-wide lab lock (``/tmp/rackctl-lab.lock``, :mod:`tests.inband.lablock`) and tears everything down
(VMs, daemons, namespace) when the session ends.

On top of it, session-scoped too so that every module works on the same nodes: ``served_lab`` (the head
node's mirror, registry and time server up in the lab's namespace) and ``first_run`` (the network stage
applied once through the runner). Modules that need the nodes networked ask for ``first_run``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bootstrap.environment import Environment
from bootstrap.inband.access import NodeAccess, node_access
from bootstrap.inventory import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.mirror.build import build_mirror
from bootstrap.mirror.images import push_images, required_images
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import build_manifest
from bootstrap.mirror.site_vars import site_vars
from bootstrap.provision.image import DiskImage
from bootstrap.resources import roles_dir
from bootstrap.stages.base import RunOptions
from bootstrap.stages.runner import Runner, select
from tests import timing
from tests.inband.lablock import lab_lock

WORKERS = ["gpu-01", "gpu-02"]
#: a harmless argument the installed lab's image boots with: proof that ``--kernel-arg`` reaches the boot
IMAGE_KERNEL_ARGS = ("rackctl.lab=installed",)
REPO = Path(__file__).resolve().parents[1]
#: TEST-ONLY change to the installed nodes: Debian's own periodic apt timers (apt-daily, apt-daily-upgrade)
#: fire at random times of the day (06:00 and 18:00 plus up to 12 h; 06:00 plus up to 1 h) and, once role
#: baseline has turned unattended upgrades on, upgrade from the head node's mirror while holding dpkg's lock
#: for a minute or more. The session's tests run dpkg on these nodes themselves, so the timers are masked
#: for the session: what ran is then the same at any time of day. The product's own apt and dpkg steps
#: wait for that lock (`<role>_apt_lock_timeout_s`), proven with a held lock in
#: tests/inband/test_network_stage_lab.py; a redeployed node boots a fresh image with the timers on.
QUIET_APT_TIMERS = "systemctl mask --now apt-daily.timer apt-daily-upgrade.timer"


@dataclass
class InstalledLab:
    """The installed lab a test works on (see the module docstring)."""

    inventory_path: Path
    inventory: Inventory
    state_dir: Path
    lab_dir: Path
    environment: Environment
    nodes: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    dump: str = ""
    #: the provisioning session's result per node (``ProvisionRun``: ok, timings per phase, identity)
    runs: dict[str, Any] = field(default_factory=dict)
    #: the provisioning session's logs (DHCP, HTTP, callback), for a failing test's output
    logs: dict[str, str] = field(default_factory=dict)
    #: what the image build reported as each phase started (only "the image is cached" when it was)
    image_phases: list[str] = field(default_factory=list)
    #: the image the nodes were installed with (``rackctl image build``'s: its file and raw size)
    image: DiskImage | None = None
    #: what each provisioning step reported per node (the install step: the deploy ramdisk's callback)
    step_details: dict[str, dict[str, Any]] = field(default_factory=dict)

    def access(self, host: str) -> NodeAccess:
        """How the rendered Ansible inventory reaches ``host``."""
        return node_access(self.inventory, self.state_dir, self.environment)[host]

    def ssh_argv(self, host: str, command: str, *, address: str | None = None, timeout: int = 10) -> list[str]:
        """``ssh`` argv running ``command`` on ``host`` (at ``address``, default its access address)."""
        access = self.access(host)
        argv = ["ssh", *access.ssh_options(), "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}"]
        if access.private_key:
            argv += ["-i", str(access.private_key)]
        return [*argv, f"{access.user}@{address or access.address}", command]

    def ssh(
        self, host: str, command: str, *, address: str | None = None, check: bool = True, timeout: int = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``host`` over SSH (through the lab's relay); raise with its output if ``check``."""
        proc = subprocess.run(
            self.ssh_argv(host, command, address=address),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"ssh {host} {command!r}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def copy_to(self, host: str, files: list[Path], target: str) -> None:
        """Copy local ``files`` into directory ``target`` on ``host`` (scp through the same access)."""
        access = self.access(host)
        argv = ["scp", "-q", *access.ssh_options(), "-o", "BatchMode=yes"]
        if access.private_key:
            argv += ["-i", str(access.private_key)]
        self.ssh(host, f"mkdir -p {target}")
        subprocess.run([*argv, *map(str, files), f"{access.user}@{access.address}:{target}/"], check=True)


@dataclass
class _Step:
    """One provisioning step of :class:`_StepDetails`: never done before, its detail kept on exit."""

    details: dict[str, Any]
    key: str
    already_done: bool = False
    detail: Any = None

    def __enter__(self) -> _Step:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.detail is not None:
            self.details[self.key] = self.detail


@dataclass
class _StepDetails:
    """A step journal (``ProvisionSession.provision_all``'s ``steps``) that keeps what each step reported.

    Not the lab's Journal (``ctx.step``, what ``rackctl up`` passes): the session's journal must hold no
    install of the fixture's, for tests/day2/test_redeploy_vm.py asserts the only completed install there is
    the redeploy's own."""

    details: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __call__(self, node: str, key: str, *, destructive: bool = False) -> _Step:
        return _Step(self.details.setdefault(node, {}), key)


def _install(folder: Path) -> InstalledLab:
    from bootstrap.oob import target_for
    from bootstrap.provision.flow import Artefacts, FlowSettings, ProvisionSession
    from bootstrap.provision.image import build_image
    from bootstrap.provision.ramdisk import build_ramdisk
    from rackctl_lab import paths
    from rackctl_lab.bmc_lab import plan_lab_bmcs
    from rackctl_lab.environment import LabEnvironment
    from rackctl_lab.vm_lab import lab_up_all, plan_lab_vms

    # inventory/lab.yml as shipped; its ../.lab paths resolve to <folder>/.lab, the lab directory
    (folder / "inventory").mkdir()
    inventory_path = folder / "inventory" / "lab.yml"
    shutil.copy(REPO / "inventory" / "lab.yml", inventory_path)
    lab_dir, state_dir = folder / ".lab", folder / "state"
    inventory = load_inventory(inventory_path)
    timings: dict[str, float] = {}
    start = time.monotonic()
    bmc_plan = plan_lab_bmcs(inventory)
    vm_plan = plan_lab_vms(inventory, lab_dir, bmc_plan)
    lab_up_all(bmc_plan, vm_plan, lab_dir, processes=1)
    timings["lab_up_s"] = time.monotonic() - start
    environment = LabEnvironment(lab_dir)
    key = paths.admin_key(lab_dir)
    ramdisk = build_ramdisk("lab")
    image_phases: list[str] = []
    image = build_image(
        [key.with_suffix(".pub").read_text().strip()], kernel_args=IMAGE_KERNEL_ARGS, progress=image_phases.append
    )
    session = ProvisionSession(
        inventory,
        list(WORKERS),
        state_dir=state_dir,
        artefacts=Artefacts(kernel=ramdisk.kernel, initrd=ramdisk.initrd, image=image.path),
        site=environment.boot_site(inventory),
        environment=environment,
        settings=FlowSettings(
            callback_timeout_s=timing.seconds(timing.VM_CALLBACK_S),
            ssh_timeout_s=timing.seconds(timing.VM_SSH_S),
            power_off_timeout_s=timing.seconds(120),
            power_timeout_s=timing.seconds(120),
            ssh_user="root",
            ssh_key=key,
        ),
        targets={h: target_for(inventory, inventory.node(h)) for h in WORKERS},
    )
    start = time.monotonic()
    steps = _StepDetails()
    with session:
        runs = session.provision_all(steps)
        logs = session.logs()
    timings["provision_s"] = time.monotonic() - start
    failed = {h: r.message for h, r in runs.items() if not r.ok}
    if failed:
        raise RuntimeError(
            f"lab install failed: {failed}\n" + "\n".join(f"== {k}\n{v[-4000:]}" for k, v in logs.items())
        )
    with Journal(state_dir) as journal:
        journal.register_nodes([n.hostname for n in inventory.nodes])
        for host in WORKERS:
            for to in (NodeState.DISCOVERED, NodeState.CONFIGURED, NodeState.PROVISIONING, NodeState.PROVISIONED):
                journal.transition(host, to, "installed by the installed_lab fixture")
    lab = InstalledLab(
        inventory_path, inventory, state_dir, lab_dir, environment, list(WORKERS), timings, runs=runs, logs=logs,
        image_phases=image_phases, image=image, step_details=steps.details,
    )  # fmt: skip
    for host in WORKERS:
        lab.ssh(host, QUIET_APT_TIMERS)
    return lab


FIXTURES = frozenset({"installed_lab", "served_lab", "first_run"})
#: the test module whose subject is the install this fixture made
INSTALL_PROOF = "tests/provision/test_e2e_lab.py"
#: the test module that reinstalls a node the others configured: after all of them
LAST = "tests/day2/test_redeploy_vm.py"


def uses_installed_lab(item: pytest.Item) -> bool:
    """True when the test asks (directly or through another fixture) for the session's installed lab."""
    return bool(FIXTURES & set(getattr(item, "fixturenames", ())))


def last_the_lab_modules(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with every module that has a test on the installed lab moved to the end, orders kept.

    Whole modules move (their module-scoped fixtures are set up once); the lab is then booted after every
    other VM test has taken its own VMs down, and is up, idle VMs and all, only while its users run. The
    module that proves the install itself (:data:`INSTALL_PROOF`) runs first of them: a broken install
    fails there, by name, before the tests that build on it; :data:`LAST`, which reinstalls a node, last.
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    modules = {module(item) for item in items if uses_installed_lab(item)}
    # the native clusters' modules just before them: their components build beside the earlier tests
    native = {module(item) for item in items if item.get_closest_marker("native_cluster")} - modules
    rest = [item for item in items if module(item) not in modules | native]
    late = [item for item in items if module(item) in native]
    lab = [item for item in items if module(item) in modules]
    # stable: the install's own proof first, the module that reinstalls a node last
    lab.sort(key=lambda item: (module(item) != INSTALL_PROOF) + (module(item) == LAST))
    return rest + late + lab


#: marks of the tests that use what the machine has one of, by the xdist group that runs them: the VM labs
#: (qemu TCG, one core per VM while it works) and the nspawn machines (the native cluster's, test_nspawn's).
#: ``lab`` alone is not one: those tests run emulated iDRACs on free ports and namespaces of their own
VM_MARKS = ("vm",)
NATIVE_MARKS = ("native_cluster", "machine")
#: the pytest-xdist groups that hold them: each is taken whole by one worker and run in the order set here.
#: The native cluster's first (the longer: the first worker takes it), the VMs' second (the other worker)
NATIVE_GROUP = "machine-native"
VM_GROUP = "machine-vm"


def machine_group(item: pytest.Item) -> str | None:
    """The xdist group of a test marked with one of :data:`VM_MARKS` or :data:`NATIVE_MARKS`, directly or
    through its module's marks (a VM mark wins); None for any other test."""
    if any(item.get_closest_marker(mark) for mark in VM_MARKS):
        return VM_GROUP
    if any(item.get_closest_marker(mark) for mark in NATIVE_MARKS):
        return NATIVE_GROUP
    return None


def one_worker_per_machine_group(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, every module with a test that has a :func:`machine_group` in that group, the native
    group's modules first, then the VM group's, then the rest.

    ``pytest -n 2 --dist loadgroup --no-loadscope-reorder`` (scripts/test.sh): each group is one unit of
    work, run in collection order (so :func:`last_the_lab_modules` still holds inside the VM group); xdist
    hands the first unit to one worker and the second to the other at the start, so the native cluster and
    the VM labs run beside each other (the two longest chains: one after the other they were the whole
    wall time), and whichever worker is done first takes the other tests one by one. Two VM labs never run
    at once, nor two sets of nspawn machines. A module goes whole, for its module-scoped fixtures, into
    the group of its first test that has one (a VM mark wins). Only an xdist worker's collection changes:
    plain ``pytest`` keeps the order.
    """
    if not hasattr(config, "workerinput"):
        return

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    groups: dict[str, str] = {}
    for item in items:
        group = machine_group(item)
        if group and groups.get(module(item)) != VM_GROUP:
            groups[module(item)] = group
    for item in items:
        if module(item) in groups:
            item.add_marker(pytest.mark.xdist_group(groups[module(item)]))
    order = {NATIVE_GROUP: 0, VM_GROUP: 1}
    items.sort(key=lambda i: order.get(groups.get(module(i), ""), 2))  # stable: each group's order kept


@pytest.hookimpl(tryfirst=True)  # before -m deselects (`-m "not vm"` sees the marks) and xdist's grouping
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if uses_installed_lab(item):
            item.add_marker(pytest.mark.vm)
    items[:] = last_the_lab_modules(items)
    one_worker_per_machine_group(config, items)


def lab_state_report(lab: InstalledLab, *, tail: int = 3000) -> str:
    """What the lab's machines were doing, for a failing test's output: each domain's libvirt state, the
    namespace's neighbour table (a VM that no longer answers ARP shows FAILED) and the end of each
    VM's serial console (a kernel that hung or panicked says so there)."""
    from rackctl_lab.vms import LabVms, connect

    lines: list[str] = []
    state = LabVms(lab.lab_dir).state()
    try:
        conn = connect()
        try:
            for spec in state.vms if state else []:
                dom = conn.lookupByName(spec.domain)
                lines.append(f"domain {spec.domain}: libvirt state {dom.state()} (1 running, 3 paused, 5 off)")
        finally:
            conn.close()
    except Exception as exc:  # a report of what could be read
        lines.append(f"libvirt: {exc}")
    if state:
        neigh = subprocess.run(
            ["ip", "netns", "exec", state.netns, "ip", "neigh"], capture_output=True, text=True, check=False
        )
        lines.append(f"ip neigh in {state.netns}:\n{neigh.stdout or neigh.stderr}")
    for log in sorted((lab.lab_dir / "vms").glob("*.serial.log")):
        lines.append(f"===== {log.name} (last {tail} characters)\n{log.read_text(errors='replace')[-tail:]}")
    return "\n".join(lines)


#: a failing test on the installed lab gets the lab's state once per session (the first failure)
_REPORTED: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """The first failing test of the installed lab carries :func:`lab_state_report` in its output."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or _REPORTED or not uses_installed_lab(item):
        return
    funcargs = getattr(item, "funcargs", {})
    lab = funcargs.get("installed_lab") or getattr(funcargs.get("served_lab"), "lab", None)
    if isinstance(lab, InstalledLab):
        _REPORTED.append(item.nodeid)
        try:
            text = lab_state_report(lab)
        except Exception as exc:  # the test's own failure must still be reported
            text = f"the lab's state could not be read: {exc!r}"
        report.sections.append(("the installed lab's machines", text))


def failed_nodes(outcome: Any) -> str:
    """A failed run's per-node messages, one line each (what pytest would cut out of the outcome's repr)."""
    lines = [
        f"stage {stage.name} on {node}: {result.get('status')}: {result.get('message', '')}"
        for stage in outcome.stages
        for node, result in stage.nodes.items()
        if result.get("status") != "completed"
    ]
    return "\n".join([outcome.message, *lines])


def _serials(lab_dir: Path) -> str:
    return "\n".join(
        f"===== {log.name}\n{log.read_text(errors='replace')[-4000:]}"
        for log in sorted((lab_dir / "vms").glob("*.serial.log"))
    )


@pytest.fixture(scope="session")
def installed_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledLab]:
    """The lab of ``inventory/lab.yml`` up, its two workers installed (see the module docstring)."""
    from tests.lab.vmlab import missing_prerequisites

    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    from rackctl_lab.vm_lab import lab_down_all

    folder = tmp_path_factory.mktemp("installed-lab")
    with lab_lock():
        try:
            lab = _install(folder)
            lab.dump = _serials(folder / ".lab")
            yield lab
        except BaseException:
            print(_serials(folder / ".lab"))
            raise
        finally:
            lab_down_all(folder / ".lab")


@dataclass
class ServedLab:
    """The installed lab with the head node's site services up (``served_lab``)."""

    lab: InstalledLab
    mirror_uri: str
    registry: str
    check_image: str
    head_ip: str
    timings: dict[str, float]
    #: the head node's nginx access log (what the nodes fetched from the mirror)
    mirror_log: Path


@pytest.fixture(scope="session")
def served_lab(installed_lab: InstalledLab) -> Iterator[ServedLab]:
    """The installed lab with the head node's mirror, registry (check image pushed) and time server up."""
    from rackctl_lab.head_services import LabHeadServices
    from rackctl_lab.head_time import LabTimeServer

    lab = installed_lab
    timings: dict[str, float] = {}
    start = time.monotonic()
    layout = MirrorLayout(lab.state_dir)
    manifest = build_manifest(lab.inventory, roles_dir())
    build_mirror(layout, manifest, key_uid="rackctl lab mirror <mirror@lab.rackctl.test>")
    timings["mirror_build_s"] = time.monotonic() - start
    network = lab.environment.network  # type: ignore[attr-defined]
    services = LabHeadServices(lab.inventory, lab.state_dir, lab.lab_dir, network)
    clock = LabTimeServer(network, lab.lab_dir)
    try:
        services.start()
        clock.start()
        registry = site_vars(lab.inventory, lab.state_dir, lab.environment)["rackctl_registry"]
        pushed = push_images(layout, required_images(lab.inventory), registry, wrap=lab.environment.wrap_command)
        assert all(p["ok"] for p in pushed), pushed
        yield ServedLab(
            lab,
            services.mirror_uri,
            registry["address"],
            pushed[0]["image"],
            network.ip,
            timings,
            services.run_dir / "mirror-access.log",
        )
    finally:
        clock.stop()
        services.stop()


@pytest.fixture(scope="session")
def first_run(served_lab: ServedLab):
    """``rackctl up --stages network`` on both workers, once for the session (its outcome)."""
    lab = served_lab.lab
    selection = select(lab.inventory, stages=["network"], limit=lab.nodes)
    start = time.monotonic()
    outcome = Runner(lab.inventory, lab.state_dir, selection, options=RunOptions(environment=lab.environment)).run()
    served_lab.timings["first_run_s"] = time.monotonic() - start
    return outcome
