"""The provision stage of ``rackctl up`` (and ``rackctl provision``): PXE install, disk boot, pinned SSH.

Destructive: the ``install`` step rewrites the node's root disk; it is journalled per node, so a resumed
run never rewrites a disk whose install completed (unless ``--force``). Where the boot services listen,
which admin key logs in and which nodes are already installed (the head node that serves the installs)
come from the run's :class:`~bootstrap.environment.Environment`; the artefacts from :func:`artefacts_for`.
Options can be overridden through ``RunOptions.provision`` (:class:`~bootstrap.stages.options.ProvisionOptions`:
kernel, initrd, image, SSH key and user, callback and SSH timeouts, parallel installs).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bootstrap.inventory.models import Inventory
from bootstrap.oob import policy_for, target_for
from bootstrap.provision.flow import Artefacts, FlowSettings, NodeRun, ProvisionSession
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage
from bootstrap.stages.options import ProvisionOptions

#: the names `rackctl image ramdisk --out` and `rackctl image build --out` write
ARTEFACT_NAMES = {"kernel": "vmlinuz", "initrd": "initrd.img", "image": "disk.raw.gz"}


def artefacts_for(state_dir: Path, options: ProvisionOptions | None = None) -> Artefacts:
    """Explicit paths, else ``<state-dir>/artefacts/{vmlinuz,initrd.img,disk.raw.gz}``."""
    given = options or ProvisionOptions()
    base = Path(state_dir) / "artefacts"
    return Artefacts(
        kernel=given.kernel or base / ARTEFACT_NAMES["kernel"],
        initrd=given.initrd or base / ARTEFACT_NAMES["initrd"],
        image=given.image or base / ARTEFACT_NAMES["image"],
    )


def settings_for(options: ProvisionOptions | None = None, method: str = "image") -> FlowSettings:
    """The flow's settings: the defaults, with what ``options`` gives."""
    given = options or ProvisionOptions()
    settings = FlowSettings()
    for key in ("callback_timeout_s", "ssh_timeout_s", "power_off_timeout_s", "max_parallel"):
        if getattr(given, key) is not None:
            setattr(settings, key, getattr(given, key))
    # who the install authorises: root (image method) or the seeded admin user (autoinstall)
    settings.ssh_user = given.ssh_user or ("root" if method == "image" else "rackctl")
    if given.ssh_key is not None:
        settings.ssh_key = given.ssh_key
    return settings


@register_stage
class ProvisionStage(Stage):
    """Install the OS on every selected node except the head node, concurrently."""

    name = "provision"
    description = "PXE-install the OS, boot from disk, verify pinned SSH host keys and DMI identity"
    destructive = True

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        actions = []
        preinstalled = ctx.options.environment.preinstalled(ctx.inventory)
        for hostname in ctx.nodes:
            node = ctx.node(hostname)
            if hostname in preinstalled:
                actions.append(PlannedAction(self.name, hostname, "serve the boot services", skip="installed already"))
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
        overrides = ctx.options.provision
        inventory: Inventory = ctx.inventory
        environment = ctx.options.environment
        if overrides.ssh_key is None:
            key = environment.admin_key(inventory)
            if key is not None:
                overrides = replace(overrides, ssh_key=key)
        preinstalled = environment.preinstalled(inventory)
        hostnames = [h for h in ctx.nodes if h not in preinstalled]
        results = {
            h: NodeResult(h, ok=True, message=f"installed already (provided by the {environment.name} environment)")
            for h in ctx.nodes
            if h in preinstalled
        }
        if not hostnames:
            return StageResult.from_nodes(results)
        targets = {h: target_for(inventory, ctx.node(h)) for h in hostnames}
        session = ProvisionSession(
            inventory,
            hostnames,
            state_dir=ctx.state_dir,
            artefacts=artefacts_for(ctx.state_dir, overrides),
            site=environment.boot_site(inventory),
            environment=environment,
            settings=settings_for(overrides, inventory.cluster.install_method.value),
            targets=targets,
            policy=policy_for(ctx.state_dir),
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
