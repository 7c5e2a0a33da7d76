"""The lab's virtual machines: one libvirt domain (qemu TCG) per lab node, on the lab's bridge.

``LabVms.up()`` creates the network namespace and bridge (:mod:`rackctl_lab.netns`), starts ``virtlogd``
and ``libvirtd`` inside it without systemd (PID files under the lab directory), lets the ``libvirt-qemu``
user open ``/dev/kvm`` for libvirt's capability probes (the original owner and mode are saved and put
back by :meth:`LabVms.down`), and defines one domain per node: the node's PXE MAC on the bridge, a
virtio disk, serial console to ``<lab>/vms/<node>.serial.log`` with ``<bios useserial='yes'/>``. Domains
are defined powered off: the node's emulated iDRAC powers them on and picks the boot device
(:mod:`rackctl_lab.idrac.machine`). ``down()`` removes it all by PID and by name.

Besides its PXE port, a VM gets one virtio NIC per further inventory port (:class:`VmNic`: management,
storage, bond members), each on its network's bridge with that network's MTU, and without an option ROM
so that only the PXE port network-boots.

The guest runs as root:root (a static DAC label on the domain) so that its disk and log under the lab
directory need no relabelling; qemu is ``type='qemu'`` (TCG): the nested ``/dev/kvm`` here hangs guests.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from bootstrap.fsutil import atomic_write_text
from rackctl_lab.netns import LabNetwork, Segment

LIBVIRT_URI = "qemu:///system"
STATE_FILE = "vms.json"
DOMAIN_PREFIX = "rackctl-lab-"
KVM = Path("/dev/kvm")


class LabVmError(RuntimeError):
    """The lab's VM layer could not do what was asked (message says what and how to fix it)."""


@dataclass
class VmNic:
    """A further port of a VM: its MAC, the bridge (network switch) it is plugged into, its MTU."""

    mac: str
    bridge: str
    mtu: int = 1500


@dataclass
class VmSpec:
    """One lab node's VM (``mac``: the PXE port, on the lab's first bridge; ``nics``: the other ports)."""

    hostname: str
    mac: str
    disk: str
    serial_log: str
    memory_mib: int = 1024
    vcpus: int = 1
    disk_gib: int = 4
    uuid: str = ""  #: SMBIOS system UUID: the one the node's emulated iDRAC reports
    serial: str = ""  #: SMBIOS serial number: the node's service tag
    model: str = ""
    nics: list[VmNic] = field(default_factory=list)

    @property
    def domain(self) -> str:
        return DOMAIN_PREFIX + self.hostname


def domain_xml(spec: VmSpec, bridge: str, boot: tuple[str, ...] = ("network", "hd")) -> str:
    """libvirt domain XML for ``spec``; ``boot`` is the firmware's boot order (``network``, ``hd``)."""
    boots = "".join(f"<boot dev='{dev}'/>" for dev in boot)
    nics = "".join(_nic_xml(nic) for nic in spec.nics)
    uuid = f"\n  <uuid>{escape(spec.uuid)}</uuid>" if spec.uuid else ""
    return f"""<domain type='qemu'>
  <name>{escape(spec.domain)}</name>{uuid}
  <memory unit='MiB'>{spec.memory_mib}</memory>
  <vcpu>{spec.vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type>{boots}<bios useserial='yes'/><smbios mode='sysinfo'/></os>
  <sysinfo type='smbios'><system>
    <entry name='manufacturer'>Dell Inc.</entry>
    <entry name='product'>PowerEdge {escape(spec.model)}</entry>
    <entry name='serial'>{escape(spec.serial)}</entry>
  </system></sysinfo>
  <features><acpi/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='unsafe'/>
      <source file='{escape(spec.disk)}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <mac address='{escape(spec.mac)}'/>
      <source bridge='{escape(bridge)}'/>
      <model type='virtio'/>
    </interface>{nics}
    <serial type='file'>
      <source path='{escape(spec.serial_log)}' append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path='{escape(spec.serial_log)}' append='on'/>
      <target type='serial' port='0'/>
    </console>
    <video><model type='none'/></video>
    <memballoon model='none'/>
  </devices>
  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>
</domain>
"""


def _nic_xml(nic: VmNic) -> str:
    mtu = f"\n      <mtu size='{nic.mtu}'/>" if nic.mtu != 1500 else ""
    return f"""
    <interface type='bridge'>
      <mac address='{escape(nic.mac)}'/>
      <source bridge='{escape(nic.bridge)}'/>
      <model type='virtio'/>{mtu}
      <rom enabled='no'/>
    </interface>"""


@dataclass
class LabVmState:
    """What ``up`` started and changed, so that ``down`` undoes exactly that."""

    netns: str
    bridge: str
    address: str
    vms: list[VmSpec] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)  #: daemon name -> PID
    kvm: dict[str, int] | None = None  #: /dev/kvm's original gid and mode, if changed
    segments: list[Segment] = field(default_factory=list)  #: the lab's further networks (bridges)
    #: domains an earlier lab left defined, removed by the last ``up`` (:func:`remove_stale_domains`)
    stale_removed: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> LabVmState:
        data = json.loads(text)
        data["vms"] = [VmSpec(**{**v, "nics": [VmNic(**n) for n in v.get("nics", [])]}) for v in data.get("vms", [])]
        data["segments"] = [Segment(**seg) for seg in data.get("segments", [])]
        return cls(**data)

    @property
    def network(self) -> LabNetwork:
        """The lab network this state records."""
        return LabNetwork(self.netns, self.bridge, self.address, tuple(self.segments))


def _pids_named(name: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _pid_alive(int(entry.name), name):
            out.append(int(entry.name))
    return out


def _pid_alive(pid: int, name: str) -> bool:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return comm == name[:15]


class LabVms:
    """The lab's network namespace, libvirt daemons and domains, recorded in ``<lab_dir>/vms/``."""

    def __init__(self, lab_dir: Path, network: LabNetwork | None = None) -> None:
        self.dir = Path(lab_dir).resolve() / "vms"
        self.network = network or LabNetwork()

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    def state(self) -> LabVmState | None:
        if not self.state_path.exists():
            return None
        return LabVmState.from_json(self.state_path.read_text())

    def _save(self, state: LabVmState) -> None:
        atomic_write_text(self.state_path, state.to_json())

    def spec_for(
        self, hostname: str, mac: str, *, memory_mib: int = 1024, nics: list[VmNic] | None = None, **smbios: str
    ) -> VmSpec:
        """The VM of ``hostname`` (``smbios``: ``uuid``, ``serial``, ``model`` as its iDRAC reports)."""
        return VmSpec(
            hostname=hostname,
            mac=mac.lower(),
            disk=str(self.dir / f"{hostname}.qcow2"),
            serial_log=str(self.dir / f"{hostname}.serial.log"),
            memory_mib=memory_mib,
            nics=list(nics or []),
            **smbios,
        )

    # ----- up ---------------------------------------------------------------------------------------

    def up(self, specs: list[VmSpec]) -> LabVmState:
        """Namespace, bridge, daemons and one defined (powered-off) domain per spec."""
        self.dir.mkdir(parents=True, exist_ok=True)
        state = self.state() or LabVmState(
            self.network.name, self.network.bridge, self.network.address, segments=list(self.network.segments)
        )
        others = [pid for pid in _pids_named("libvirtd") if pid != state.pids.get("libvirtd")]
        if others:
            raise LabVmError(
                f"libvirtd already runs (PID {', '.join(map(str, others))}), probably for another lab: one lab "
                "per machine; run `rackctl lab down` for that lab first"
            )
        self._save(state)  # from here on, down() knows what to undo
        self.network.up()
        if state.kvm is None:
            state.kvm = _open_kvm_to_libvirt()
            self._save(state)
        self._start_daemons(state)
        conn = connect()
        try:
            state.stale_removed = remove_stale_domains(conn, keep={v.domain for v in state.vms})
            self._save(state)
            for spec in specs:
                self._define(conn, spec)
                if spec.hostname not in {v.hostname for v in state.vms}:
                    state.vms.append(spec)
                    self._save(state)
        finally:
            conn.close()
        return state

    def _start_daemons(self, state: LabVmState) -> None:
        for name in ("virtlogd", "libvirtd"):
            pid = state.pids.get(name)
            if pid and _pid_alive(pid, name):
                continue
            pid_file = self.dir / f"{name}.pid"
            pid_file.unlink(missing_ok=True)
            log = self.dir / f"{name}.log"
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LIBVIRT_LOG_OUTPUTS": f"3:file:{log}"}
            cmd = [*self.network.exec_prefix(), f"/usr/sbin/{name}", "--daemon", "--pid-file", str(pid_file)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                raise LabVmError(f"{name} did not start: {proc.stderr.strip() or proc.stdout.strip()}")
            state.pids[name] = _wait_pid_file(pid_file, name)
            self._save(state)
        _wait_libvirt()

    def _define(self, conn: Any, spec: VmSpec) -> None:
        disk = Path(spec.disk)
        if not disk.exists():
            proc = subprocess.run(
                ["qemu-img", "create", "-q", "-f", "qcow2", str(disk), f"{spec.disk_gib}G"],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise LabVmError(f"qemu-img create {disk}: {proc.stderr.strip()}")
        Path(spec.serial_log).touch()
        conn.defineXML(domain_xml(spec, self.network.bridge))

    # ----- down -------------------------------------------------------------------------------------

    def down(self) -> dict[str, Any]:
        """Destroy and undefine the domains, stop the daemons by PID, restore /dev/kvm, delete the netns."""
        state = self.state()
        if state is None:
            return {"domains": [], "daemons": [], "netns_deleted": False, "kvm_restored": False}
        removed: list[str] = []
        if state.pids.get("libvirtd") and _pid_alive(state.pids["libvirtd"], "libvirtd"):
            with contextlib.suppress(Exception):
                conn = connect()
                try:
                    for spec in state.vms:
                        if _remove_domain(conn, spec.domain):
                            removed.append(spec.domain)
                finally:
                    conn.close()
        stopped = []
        for name in ("libvirtd", "virtlogd"):
            pid = state.pids.get(name)
            if pid and _stop_pid(pid, name):
                stopped.append(name)
        _kill_leftover_qemu(state)
        restored = False
        if state.kvm is not None:
            _restore_kvm(state.kvm)
            restored = True
        deleted = state.network.down()
        self.state_path.unlink(missing_ok=True)
        return {"domains": removed, "daemons": stopped, "netns_deleted": deleted, "kvm_restored": restored}

    def wipe_disk(self, spec: VmSpec) -> None:
        """Replace the node's disk with an empty one (a lab node "fresh from the factory")."""
        Path(spec.disk).unlink(missing_ok=True)
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", spec.disk, f"{spec.disk_gib}G"],
            check=True,
            capture_output=True,
        )


def connect(uri: str = LIBVIRT_URI) -> Any:
    """An open libvirt connection (raises :class:`LabVmError` with the fix when libvirt is missing)."""
    try:
        import libvirt  # noqa: PLC0415 - optional: only the lab needs it
    except ImportError as exc:
        raise LabVmError("libvirt-python is missing: pip install 'rackctl[test]'") from exc
    libvirt.registerErrorHandler(lambda *_: None, None)  # errors are raised, not printed
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise LabVmError(f"cannot reach libvirtd at {uri}: {exc}; run `rackctl lab up`") from exc


def remove_stale_domains(conn: Any, keep: set[str]) -> list[str]:
    """Remove the lab's domains that libvirtd loaded from its disk but this lab's state does not record.

    libvirtd keeps a defined domain's XML under ``/etc/libvirt/qemu`` across restarts; a lab that did not
    come down (killed mid-run, its libvirtd gone before ``down``) leaves its domains there, and the next
    lab's libvirtd loads them: defining a node of the same name then fails ("already exists with uuid").
    One lab runs per machine (``up`` refuses a second libvirtd), so a ``rackctl-lab-`` domain not in
    ``keep`` belongs to no running lab. Returns the names removed.
    """
    removed = []
    for dom in conn.listAllDomains(0):
        name = dom.name()
        if name.startswith(DOMAIN_PREFIX) and name not in keep and _remove_domain(conn, name):
            removed.append(name)
    return removed


def _remove_domain(conn: Any, name: str) -> bool:
    import libvirt  # noqa: PLC0415

    try:
        dom = conn.lookupByName(name)
    except libvirt.libvirtError:
        return False
    if dom.isActive():
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
    dom.undefine()
    return True


def _wait_pid_file(path: Path, name: str, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            pid = int(path.read_text().strip())
            if _pid_alive(pid, name):
                return pid
        time.sleep(0.1)
    raise LabVmError(f"{name} wrote no PID file at {path} within {timeout:.0f}s")


def _wait_libvirt(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            connect().close()
            return
        except LabVmError as exc:
            last = exc
            time.sleep(0.2)
    raise LabVmError(f"libvirtd does not answer: {last}")


def _stop_pid(pid: int, name: str, timeout: float = 10.0) -> bool:
    if not _pid_alive(pid, name):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid_alive(pid, name):
        time.sleep(0.1)
    if _pid_alive(pid, name):
        os.kill(pid, signal.SIGKILL)
    return True


def _kill_leftover_qemu(state: LabVmState) -> None:
    """qemu processes of our domains that outlived libvirtd (matched by PID file, then by name)."""
    for spec in state.vms:
        pid_file = Path(f"/run/libvirt/qemu/{spec.domain}.pid")
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if f"guest={spec.domain}".encode() in cmdline:
                os.kill(pid, signal.SIGKILL)


def _open_kvm_to_libvirt() -> dict[str, int] | None:
    """Let group kvm (libvirt-qemu's) open /dev/kvm; return the original gid/mode to restore."""
    if not KVM.exists():
        return None
    st = KVM.stat()
    try:
        kvm_gid = grp.getgrnam("kvm").gr_gid
    except KeyError:
        return None
    os.chown(KVM, -1, kvm_gid)
    os.chmod(KVM, (st.st_mode & 0o7777) | 0o060)
    return {"gid": st.st_gid, "mode": st.st_mode & 0o7777}


def _restore_kvm(saved: dict[str, int]) -> None:
    if KVM.exists():
        os.chown(KVM, -1, saved["gid"])
        os.chmod(KVM, saved["mode"])
