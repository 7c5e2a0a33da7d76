"""The ``rackctl`` command line. Each area registers its commands from its own module, loaded on use.

``rackctl --help`` imports no command module: the root group knows each built-in command's module and
one-line help (:data:`COMMANDS`), and imports a module only when one of its commands runs (or its own
``--help`` is asked for). Other packages add commands through the ``rackctl.commands`` entry-point group
(``name = "package.module:click_command"``); the lab's ``rackctl lab`` comes that way from ``rackctl_lab``.

With ``--json`` anywhere on the command line, stdout is one JSON document whatever happens: click's own
usage errors (unknown option, bad choice, missing argument; exit 2) and Ctrl-C (exit 130) included.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import click

from bootstrap import __version__
from bootstrap.errors import EXIT_INTERRUPTED


def wants_json(args: Sequence[str]) -> bool:
    """Whether ``--json`` is on the command line (before a ``--`` that ends the options)."""
    options = list(args)
    if "--" in options:
        options = options[: options.index("--")]
    return "--json" in options


def _json_failure(error: str, exit_code: int, **extra: Any) -> None:
    doc = {"ok": False, "error": error, "exit_code": exit_code, "errors": [{"path": "", "message": error}], **extra}
    click.echo(json.dumps(doc, indent=2))


class RackctlGroup(click.Group):
    """The root group: with ``--json``, usage errors and interrupts become a JSON document too."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode or not wants_json(argv):
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:  # UsageError, BadParameter, NoSuchOption, ...
            usage = exc.ctx.get_usage() if isinstance(exc, click.UsageError) and exc.ctx else None
            _json_failure(exc.format_message(), exc.exit_code, **({"usage": usage} if usage else {}))
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            _json_failure("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(0)


PLUGIN_GROUP = "rackctl.commands"

#: Built-in command -> (module whose ``register(group)`` adds it, one-line help shown by ``rackctl --help``).
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("bootstrap.cli.inventory_cmds", "Check the inventory: every problem at once, with the fix."),
    "init": ("bootstrap.cli.inventory_cmds", "Write a sample inventory to edit."),
    "inventory": ("bootstrap.cli.inventory_cmds", "Derived inventories (Ansible)."),
    "doctor": ("bootstrap.cli.doctor_cmd", "What this machine lacks, with the command that installs it."),
    "plan": ("bootstrap.cli.run_cmds", "Show what `up` would do, per stage and node (changes nothing)."),
    "up": ("bootstrap.cli.run_cmds", "Run the bootstrap stages in order; run it again to resume."),
    "journal": ("bootstrap.cli.run_cmds", "The run journal: node lifecycle states and history."),
    "runs": ("bootstrap.cli.runs_cmd", "Past runs: start, duration, outcome, nodes failed, output."),
    "logs": ("bootstrap.cli.logs_cmd", "The Ansible output of past runs, per run and per node."),
    "discover": ("bootstrap.cli.bmc_cmds", "Read each node's hardware through its iDRAC and check it."),
    "power": ("bootstrap.cli.bmc_cmds", "Power nodes on, off or cycle them through their iDRACs."),
    "bios": ("bootstrap.cli.bmc_cmds", "BIOS profiles: plan and stage them per node role."),
    "bmc": ("bootstrap.cli.bmc_cmds", "BMC (iDRAC) housekeeping."),
    "firmware": ("bootstrap.cli.firmware_cmds", "Firmware: plan against the baseline, roll it out in batches."),
    "image": ("bootstrap.cli.image_cmds", "Build the deploy ramdisk and the OS image."),
    "provision": ("bootstrap.cli.provision_cmds", "PXE-install nodes and prove them over pinned SSH."),
    "triton": ("bootstrap.cli.triton_cmds", "Triton model repositories: render, check, load, manifests."),
    "size": ("bootstrap.cli.size_cmd", "Servers needed for your models and demand."),
    "render": (
        "bootstrap.cli.cluster_cmds",
        "Render what the cluster stages would apply, validated (touches nothing).",
    ),
    "validate-cluster": ("bootstrap.cli.cluster_cmds", "Check a running cluster: nodes Ready, GPUs, Fabric Manager."),
    "status": ("bootstrap.cli.day2_cmds", "Per node: power, health, lifecycle, firmware, driver, Kubernetes, GPUs."),
    "apply": ("bootstrap.cli.day2_cmds", "Reconcile the cluster with the edited inventory (plan first)."),
    "redeploy": ("bootstrap.cli.day2_cmds", "Reinstall one node and bring it back through the stages."),
    "driver": ("bootstrap.cli.day2_cmds", "NVIDIA GPU driver upgrades: checks, plan, rendered playbook."),
    "mirror": ("bootstrap.cli.mirror_cmds", "The head node's package mirror and registry: build, check, images."),
}


class LazyGroup(RackctlGroup):
    """The root group: JSON errors (:class:`RackctlGroup`), and a command's module imported only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands, *_plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name][0]).register(self)
            return self.commands.get(cmd_name)
        plugin = _plugins().get(cmd_name)
        if plugin is not None:
            command = plugin.load()
            self.add_command(command, cmd_name)
            return command
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in COMMANDS and name not in self.commands:
                rows.append((name, COMMANDS[name][1]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _plugins() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=PLUGIN_GROUP)}


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="rackctl")
@click.option(
    "--env",
    "env_name",
    envvar="RACKCTL_ENV",
    show_envvar=True,
    default=None,
    metavar="NAME",
    help="Where rackctl runs: `host` (a real head node, the default) or a registered environment such as `lab` "
    "(default for an inventory with cluster.lab: true when the lab is installed).",
)
@click.pass_context
def cli(ctx: click.Context, env_name: str | None) -> None:
    """rackctl: a rack of Dell PowerEdge servers from bare metal to serving LLMs.

    Exit codes: 0 ok, 1 something failed, 2 invalid input, 3 missing tool on this machine,
    4 stage not implemented yet, 5 not applied (only rendered + validated: stages, driver upgrade),
    130 interrupted.

    \b
    Environment variables (each the default of an option):
      RACKCTL_INVENTORY  -i/--inventory, the cluster inventory
      RACKCTL_STATE_DIR  --state-dir, the journal and rendered artefacts
      RACKCTL_ENV        --env, where rackctl runs (host, lab)
    and read by the commands that need them:
      RACKCTL_SSH_KEY           the admin SSH key for the nodes (else ssh's)
      RACKCTL_CACHE             the image build cache (~/.cache/rackctl)
      RACKCTL_ANSIBLE_STRATEGY  how Ansible reaches nodes: mitogen or linear
    """
    ctx.ensure_object(dict)["env_name"] = env_name


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="rackctl")
