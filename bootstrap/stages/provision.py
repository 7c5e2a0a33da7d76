"""The provision stage of ``rackctl up`` (and ``rackctl provision``): PXE install, disk boot, pinned SSH.

Destructive: the ``install`` step rewrites the node's root disk; it is journalled per node, so a resumed
run never rewrites a disk whose install completed (unless ``--force``). Where the boot services run and
which artefacts they serve come from :func:`session_config_for` and :func:`artefacts_for`; options can
be overridden through ``RunOptions.extra["provision"]`` (keys: ``kernel``, ``initrd``, ``image``,
``ssh_key``, ``ssh_user``, ``callback_timeout_s``, ``ssh_timeout_s``, ``lab_dir``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory, Role
from bootstrap.provision.flow import Artefacts, FlowSettings, NodeRun, ProvisionSession, SessionConfig
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage
from bootstrap.stages.oob import target_for


def lab_admin_key_path(lab_dir: Path) -> Path:
    """Where ``rackctl lab up`` keeps the lab admin's SSH private key."""
    return lab_dir / "ssh" / "id_ed25519"

#: the names `rackctl image ramdisk --out` and `rackctl image build --out` write
ARTEFACT_NAMES = {"kernel": "vmlinuz", "initrd": "initrd.img", "image": "disk.raw.gz"}


def artefacts_for(state_dir: Path, overrides: dict[str, Any]) -> Artefacts:
    """Explicit paths, else ``<state-dir>/artefacts/{vmlinuz,initrd.img,disk.raw.gz}``."""
    base = Path(state_dir) / "artefacts"
    paths = {k: Path(overrides[k]) if overrides.get(k) else base / name for k, name in ARTEFACT_NAMES.items()}
    return Artefacts(kernel=paths["kernel"], initrd=paths["initrd"], image=paths["image"])


def session_config_for(inventory: Inventory, overrides: dict[str, Any]) -> SessionConfig:
    """Lab: the lab's namespace and bridge (from ``lab up``'s record). Hardware: the head node's PXE NIC."""
    if inventory.cluster.lab:
        from bootstrap.lab.vm_lab import lab_vm_state  # noqa: PLC0415 - lab only

        lab_dir = Path(overrides.get("lab_dir") or inventory.resolve_path(Path("../.lab")))
        state = lab_vm_state(lab_dir)
        if state is None:
            raise InvalidInput(
                "the lab's VMs are not up",
                problems=[Problem("lab", f"no VM record in {lab_dir}", "run `rackctl lab up -i <inventory>` first")],
            )
        return SessionConfig(server_ip=state.address.split("/")[0], interface=state.bridge, netns=state.netns)
    heads = [n for n in inventory.nodes if n.role == Role.HEAD]
    nic = heads[0].interface_on("pxe") if heads else None
    if nic is None or nic.ip is None:
        raise InvalidInput(
            "no head node with a PXE address to serve the installs",
            problems=[Problem("nodes[role=head].interfaces", "no pxe interface with ip", "add one")],
        )
    return SessionConfig(server_ip=str(nic.ip), interface=nic.name)


def settings_for(overrides: dict[str, Any], method: str = "image") -> FlowSettings:
    settings = FlowSettings()
    for key in ("callback_timeout_s", "ssh_timeout_s", "power_off_timeout_s", "ssh_user"):
        if overrides.get(key) is not None:
            setattr(settings, key, overrides[key])
    if not overrides.get("ssh_user"):
        settings.ssh_user = "root" if method == "image" else "rackctl"  # who the install authorises
    if overrides.get("ssh_key"):
        settings.ssh_key = Path(overrides["ssh_key"])
    return settings


@register_stage
class ProvisionStage(Stage):
    """Install the OS on every selected node except the head node, concurrently."""

    name = "provision"
    description = "PXE-install the OS, boot from disk, verify pinned SSH host keys and DMI identity"
    destructive = True

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        actions = []
        for hostname in ctx.nodes:
            node = ctx.node(hostname)
            if node.role == Role.HEAD:
                actions.append(PlannedAction(self.name, hostname, "serve the boot services", skip="head node"))
                continue
            disk = node.root_disk_hint or "the largest disk"
            actions.append(
                PlannedAction(
                    self.name,
                    hostname,
                    f"one-time PXE boot, {ctx.inventory.cluster.install_method.value} install to {disk}, "
                    "disk boot, pinned SSH host key, DMI identity check",
                    destructive=True,
                )
            )
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        overrides = dict(ctx.options.extra.get("provision", {}))
        inventory: Inventory = ctx.inventory
        if inventory.cluster.lab and not overrides.get("ssh_key"):
            # the key `rackctl lab up` made for the lab's admin (the image authorises its public half)
            lab_key = lab_admin_key_path(Path(overrides.get("lab_dir") or inventory.resolve_path(Path("../.lab"))))
            if lab_key.exists():
                overrides["ssh_key"] = str(lab_key)
        heads = [h for h in ctx.nodes if ctx.node(h).role == Role.HEAD]
        hostnames = [h for h in ctx.nodes if h not in heads]
        results = {h: NodeResult(h, ok=True, message="head node: serves the installs") for h in heads}
        if not hostnames:
            return StageResult.from_nodes(results)
        targets = {h: target_for(inventory, ctx.node(h)) for h in hostnames}
        session = ProvisionSession(
            inventory,
            hostnames,
            state_dir=ctx.state_dir,
            artefacts=artefacts_for(ctx.state_dir, overrides),
            config=session_config_for(inventory, overrides),
            settings=settings_for(overrides, inventory.cluster.install_method.value),
            targets=targets,
        )

        def done(run: NodeRun) -> None:
            ctx.progress.node_done(self.name, run.hostname, run.ok, run.message)

        with session:
            runs = session.provision_all(ctx.step, on_done=done, on_phase=lambda n, p: ctx.progress.log(f"{n}: {p}"))
        for hostname, run in runs.items():
            if run.identity:
                ctx.record_facts(hostname, {"dmi": run.identity, "timings": run.timings})
            results[hostname] = NodeResult(hostname, ok=run.ok, message=run.message, changed=True, data=run.as_dict())
        return StageResult.from_nodes(results)
