"""The provisioning flow: bare metal (or a lab VM) to a running OS reachable over SSH with a pinned key.

Per node, concurrently, each node's failure its own::

    network-boot  one-time PXE override over Redfish, power on (off first if it was on)
    install       wait for the deploy ramdisk's / installer's callback with the node's one-time token
    power-off     wait until the node has powered itself off (force it off after a grace period)
    disk-boot     one-time Hdd override, power on: works whether the BMC honours ``Once`` or not
    ssh           wait for SSH; the host key must be the one rackctl generated and pinned
    identity      the DMI system UUID and serial read over SSH must be what the node's BMC reports

A :class:`ProvisionSession` holds what the nodes share: the rendered boot tree (one token per node), the
boot services (dnsmasq + nginx) and the callback receiver. Where those listen and how nodes are reached
(sockets, commands, SSH) is the :class:`~bootstrap.environment.Environment`'s business: the host's on a
real site, the lab's in the lab.
Steps are journalled through a :class:`StepJournal` (the provision stage passes its ``ctx.step``) so a
resumed run never rewrites a disk whose install completed. When a node fails, its override is put back
to ``Hdd``, it is powered off and its token is burnt: nothing is left half-configured.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import paramiko

from bootstrap.environment import BootSite, Environment, HostEnvironment
from bootstrap.errors import RackctlError
from bootstrap.inventory.models import Inventory
from bootstrap.provision.api import BootConfig, BootTree
from bootstrap.provision.callback import CallbackReceiver
from bootstrap.provision.render import render_boot_tree
from bootstrap.provision.services import BootServices
from redfish_tools import errors as rf_errors
from redfish_tools.boot import set_boot_once
from redfish_tools.connection import BmcConnection, BmcTarget, ConnectionPolicy
from redfish_tools.power import power_state, set_power
from redfish_tools.resources import Service
from redfish_tools.views import ComputerSystem

PHASES = ("network-boot", "install", "power-off", "disk-boot", "ssh", "identity")
#: Seconds between power-state reads while waiting for a node to power itself off (one cheap GET each).
POWER_POLL_S = 0.5
#: Right after its callback a node powers itself off within seconds: the wait polls faster for that window.
POWER_POLL_FAST_S = 0.1
POWER_FAST_WINDOW_S = 5.0
#: Seconds between SSH login attempts while the installed system boots (a refused connection costs nothing).
SSH_RETRY_S = 1.0
DMI_COMMAND = "cat /sys/class/dmi/id/product_uuid /sys/class/dmi/id/product_serial"


class NodeFailed(RackctlError):
    """One node's provisioning failed in ``phase`` (the message says why and what to check)."""

    def __init__(self, phase: str, message: str) -> None:
        super().__init__(f"{phase}: {message}")
        self.phase = phase


@dataclass
class FlowSettings:
    """Timeouts and the SSH identity the flow logs in with (the image's / seed's admin user)."""

    callback_timeout_s: float = 900.0
    #: nodes installing at once; the rest queue (each node's timeouts start when it starts). 32 keeps a wave
    #: of images within the callback timeout over the design's 1 GbE PXE network: see docs/provisioning.md.
    max_parallel: int = 32
    power_off_timeout_s: float = 120.0
    ssh_timeout_s: float = 600.0
    power_timeout_s: float = 120.0
    ssh_user: str = "root"  #: image method: the image authorises the admin keys for root
    ssh_key: Path | None = None
    ssh_port: int = 22


@dataclass
class Artefacts:
    """What the head node serves: deploy/installer kernel and initrd, and the image (image method)."""

    kernel: Path | None = None
    initrd: Path | None = None
    image: Path | None = None
    iso: Path | None = None


@dataclass
class NodeRun:
    """Outcome of one node: ``phase`` is where it stopped (the last phase when ok)."""

    hostname: str
    ok: bool = False
    phase: str = ""
    message: str = ""
    timings: dict[str, float] = field(default_factory=dict)  #: phase -> seconds
    identity: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  #: phases already done in an earlier run

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class StepHandleLike(Protocol):
    already_done: bool
    detail: Any

    def __enter__(self) -> StepHandleLike: ...
    def __exit__(self, *exc: object) -> Any: ...


class StepJournal(Protocol):
    """``ctx.step`` of a stage, or :class:`NoJournal`."""

    def __call__(self, node: str, key: str, *, destructive: bool = False) -> Any: ...


class _NoStep:
    already_done = False
    detail: Any = None

    def __enter__(self) -> _NoStep:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def no_journal(node: str, key: str, *, destructive: bool = False) -> _NoStep:
    """A step journal that remembers nothing (standalone use, tests)."""
    return _NoStep()


class ProvisionSession:
    """Boot tree + boot services + callback receiver for one provisioning run (a context manager)."""

    def __init__(
        self,
        inventory: Inventory,
        hostnames: list[str],
        *,
        state_dir: Path,
        artefacts: Artefacts,
        site: BootSite,
        environment: Environment | None = None,
        settings: FlowSettings | None = None,
        policy: ConnectionPolicy | None = None,
        targets: dict[str, BmcTarget] | None = None,
        image_url: str = "",
    ) -> None:
        self.inventory = inventory
        self.hostnames = list(hostnames)
        self.state_dir = Path(state_dir)
        self.artefacts = artefacts
        self.site = site
        self.environment: Environment = environment or HostEnvironment()
        self.settings = settings or FlowSettings()
        self.policy = policy or ConnectionPolicy()
        self.targets = targets or {}
        self.image_url = image_url
        self.tree: BootTree | None = None
        self.receiver: CallbackReceiver | None = None
        self.services: Any = None

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "provision" / "logs"

    # ----- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> ProvisionSession:
        self.receiver = CallbackReceiver(self.environment.listener_socket()).start()
        try:
            tokens = {h: secrets.token_urlsafe(24) for h in self.hostnames}
            self.tree = render_boot_tree(
                BootConfig(
                    inventory=self.inventory,
                    out_dir=self.state_dir / "boot",
                    server_ip=self.site.server_ip,
                    http_port=self.site.http_port,
                    interface=self.site.interface,
                    image=self.artefacts.image,
                    kernel=self.artefacts.kernel,
                    initrd=self.artefacts.initrd,
                    tokens=tokens,
                    callback_upstream=self.receiver.upstream,
                    nodes=self.hostnames,
                    state_dir=self.state_dir,
                    image_url=self.image_url,
                    iso=self.artefacts.iso,
                )
            )
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.services = BootServices(self.tree, wrap=self.environment.wrap_command, log_dir=self.log_dir)
            self.services.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.services is not None:
            self.services.stop()
            self.services = None
        if self.receiver is not None:
            self.receiver.stop()
            self.receiver = None

    def logs(self) -> dict[str, str]:
        """dnsmasq/nginx logs and refused callbacks (for dumping on failure)."""
        out = dict(self.services.logs()) if self.services is not None else {}
        if self.receiver is not None and self.receiver.rejected:
            out["callback-rejected"] = "\n".join(str(r) for r in self.receiver.rejected)
        return out

    # ----- the flow ----------------------------------------------------------------------------------

    def provision_all(
        self,
        steps: StepJournal = no_journal,
        on_done: Callable[[NodeRun], None] | None = None,
        on_phase: Callable[[str, str], None] | None = None,
    ) -> dict[str, NodeRun]:
        """Every node, ``max_parallel`` at a time; one node's failure never stops the others.

        Results are reported (``on_done``) as nodes finish and returned in the order the nodes were given.
        """
        results: dict[str, NodeRun] = {}
        workers = max(1, min(len(self.hostnames), self.settings.max_parallel))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="provision") as pool:
            futures = {pool.submit(self.provision_node, h, steps, on_phase): h for h in self.hostnames}
            for future in as_completed(futures):
                run = future.result()
                results[futures[future]] = run
                if on_done:
                    on_done(run)
        return {h: results[h] for h in self.hostnames}

    def provision_node(
        self,
        hostname: str,
        steps: StepJournal = no_journal,
        on_phase: Callable[[str, str], None] | None = None,
    ) -> NodeRun:
        """Run the six phases on one node; never raises for the node's own failure."""
        run = NodeRun(hostname)
        assert self.tree is not None and self.receiver is not None, "use the session as a context manager"
        boot = self.tree.nodes[hostname]
        target = self.targets[hostname]
        try:
            with BmcConnection(target, self.policy) as conn:
                expected = _bmc_identity(conn)
                login: dict[str, paramiko.SSHClient] = {}  # the ssh phase's login, reused by the identity check
                phases: list[tuple[str, bool, Callable[[], Any]]] = [
                    ("install", True, lambda: self._install(conn, hostname, boot.token, run, on_phase)),
                    ("disk-boot", False, lambda: self._disk_boot(conn, run)),
                    ("ssh", False, lambda: self._ssh(boot.ip, run, login)),
                    ("identity", False, lambda: self._identity(boot.ip, expected, run, login.pop("client", None))),
                ]
                try:
                    for key, destructive, action in phases:
                        with steps(hostname, key, destructive=destructive) as step:
                            if step.already_done and key == "install":
                                run.skipped.append(key)
                                continue
                            detail = action()
                            if detail:
                                step.detail = detail
                finally:
                    for client in login.values():
                        client.close()
            run.ok, run.phase = True, PHASES[-1]
        except NodeFailed as exc:
            run.phase, run.message = exc.phase, exc.message
            self._clean_up(target, hostname)
        except (rf_errors.RedfishError, RackctlError, OSError) as exc:
            run.phase = run.phase or "network-boot"
            run.message = f"{run.phase}: {exc}"
            self._clean_up(target, hostname)
        return run

    def _install(
        self,
        conn: BmcConnection,
        hostname: str,
        token: str,
        run: NodeRun,
        on_phase: Callable[[str, str], None] | None,
    ) -> dict[str, Any]:
        assert self.receiver is not None
        with _phase(run, "network-boot", on_phase):
            if power_state(conn) != "Off":
                set_power(conn, "off", timeout=self.settings.power_timeout_s)
            self.receiver.arm(hostname, token)
            set_boot_once(conn, "Pxe")
            set_power(conn, "on", timeout=self.settings.power_timeout_s)
        with _phase(run, "install", on_phase):
            report = self.receiver.wait(hostname, self.settings.callback_timeout_s)
            self.receiver.disarm(hostname)
            if report is None:
                raise NodeFailed(
                    "install",
                    f"no callback within {self.settings.callback_timeout_s:.0f}s: the node did not boot "
                    "the deploy ramdisk or cannot reach the head node (check its console, DHCP and HTTP logs)",
                )
            if not report.ok:
                raise NodeFailed("install", f"the node reported an error: {report.detail or 'no detail'}")
        with _phase(run, "power-off", on_phase):
            if not _wait_power(conn, "Off", self.settings.power_off_timeout_s):
                set_power(conn, "off", timeout=self.settings.power_timeout_s)
        return {"callback": report.detail, "installed_at": report.received_at}

    def _disk_boot(self, conn: BmcConnection, run: NodeRun) -> None:
        with _phase(run, "disk-boot"):
            if power_state(conn) != "Off":
                set_power(conn, "off", timeout=self.settings.power_timeout_s)
            set_boot_once(conn, "Hdd")
            set_power(conn, "on", timeout=self.settings.power_timeout_s)

    def _ssh(self, ip: str, run: NodeRun, login: dict[str, paramiko.SSHClient]) -> dict[str, Any]:
        """Wait for a login with the pinned host key; the open client is left in ``login`` for the next phase."""
        with _phase(run, "ssh"):
            client = self._wait_ssh(ip)
            fingerprint = client.get_transport().get_remote_server_key().fingerprint  # type: ignore[union-attr]
            login["client"] = client
        return {"host_key": fingerprint}

    def _identity(
        self, ip: str, expected: dict[str, str], run: NodeRun, client: paramiko.SSHClient | None = None
    ) -> dict[str, str]:
        """Read the node's DMI identity over SSH (on ``client``, the ssh phase's login, when it is still open)."""
        with _phase(run, "identity"):
            transport = client.get_transport() if client is not None else None
            if client is None or transport is None or not transport.is_active():
                if client is not None:
                    client.close()
                client = self._wait_ssh(ip, timeout=60)
            try:
                command = DMI_COMMAND if self.settings.ssh_user == "root" else f"sudo -n {DMI_COMMAND}"
                _stdin, stdout, stderr = client.exec_command(command, timeout=30)
                lines = stdout.read().decode().split()
                err = stderr.read().decode().strip()
            finally:
                client.close()
            if len(lines) < 2:
                raise NodeFailed("identity", f"cannot read DMI over SSH ({err or 'no output'})")
            seen = {"uuid": lines[0].lower(), "serial": lines[1]}
            run.identity = seen
            wrong = [k for k in ("uuid", "serial") if expected.get(k) and seen[k] != expected[k]]
            if wrong:
                raise NodeFailed(
                    "identity",
                    "the machine answering at this node's address is not the one its BMC drives: "
                    + ", ".join(f"{k} {seen[k]!r} != BMC {expected[k]!r}" for k in wrong)
                    + " (swapped cables or MACs in the inventory?)",
                )
        return seen

    def _wait_ssh(self, ip: str, timeout: float | None = None) -> paramiko.SSHClient:
        """Log in with the admin key once SSH answers; the host key must match the pinned one."""
        assert self.tree is not None
        deadline = time.monotonic() + (timeout or self.settings.ssh_timeout_s)
        key = _load_key(self.settings.ssh_key)
        last = ""
        while time.monotonic() < deadline:
            client = paramiko.SSHClient()
            client.load_host_keys(str(self.tree.known_hosts))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            try:
                sock = self.environment.connect(ip, self.settings.ssh_port, 10.0)
                client.connect(
                    ip,
                    port=self.settings.ssh_port,
                    username=self.settings.ssh_user,
                    pkey=key,
                    sock=sock,
                    timeout=15,
                    banner_timeout=30,
                    auth_timeout=30,
                    look_for_keys=False,
                    allow_agent=False,
                )
                return client
            except paramiko.BadHostKeyException as exc:
                client.close()
                raise NodeFailed(
                    "ssh",
                    f"{ip} presented host key {exc.key.fingerprint}, pinned is {exc.expected_key.fingerprint}: "
                    "another machine answers at this address, or it was not installed from this state dir",
                ) from None
            except (OSError, paramiko.SSHException, EOFError) as exc:
                client.close()
                last = str(exc) or type(exc).__name__
                time.sleep(SSH_RETRY_S)
        raise NodeFailed("ssh", f"no SSH login at {ip} within the timeout (last error: {last})")

    def _clean_up(self, target: BmcTarget, hostname: str) -> None:
        """After a failure: burn the token, boot override back to disk, power off (best effort)."""
        if self.receiver is not None:
            self.receiver.disarm(hostname)
        with contextlib.suppress(Exception), BmcConnection(target, self.policy) as conn:
            set_power(conn, "off", timeout=self.settings.power_timeout_s)
            set_boot_once(conn, "Hdd")


@contextlib.contextmanager
def _phase(run: NodeRun, name: str, on_phase: Callable[[str, str], None] | None = None) -> Iterator[None]:
    run.phase = name
    if on_phase:
        on_phase(run.hostname, name)
    start = time.monotonic()
    try:
        yield
    finally:
        run.timings[name] = round(time.monotonic() - start, 2)


def _bmc_identity(conn: BmcConnection) -> dict[str, str]:
    """System UUID and service tag as the BMC reports them (what DMI on the host must say)."""
    system = ComputerSystem.from_json(Service(conn).system(fresh=True))
    uuid = str(system.uuid or "").lower()
    serial = str(system.sku or system.serial_number or "")
    return {"uuid": uuid, "serial": serial}


def _wait_power(conn: BmcConnection, wanted: str, timeout: float) -> bool:
    """Poll until the BMC reports ``wanted``: every :data:`POWER_POLL_FAST_S` for the first
    :data:`POWER_FAST_WINDOW_S` (a node that called back is powering itself off right now), then every
    :data:`POWER_POLL_S`."""
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(rf_errors.TransportError, rf_errors.NotReadyError):
            if power_state(conn) == wanted:
                return True
        fast = time.monotonic() - start < POWER_FAST_WINDOW_S
        time.sleep(POWER_POLL_FAST_S if fast else POWER_POLL_S)
    return False


def _load_key(path: Path | None) -> paramiko.PKey | None:
    if path is None:
        return None
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        with contextlib.suppress(paramiko.SSHException, ValueError):
            return cls.from_private_key_file(str(path))
    raise RackctlError(f"cannot read the SSH private key {path} (ed25519, ecdsa or rsa, unencrypted)")
