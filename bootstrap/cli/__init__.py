"""The ``rackctl`` command line. Each area registers its commands from its own module.

With ``--json`` anywhere on the command line, stdout is one JSON document whatever happens: click's own
usage errors (unknown option, bad choice, missing argument; exit 2) and Ctrl-C (exit 130) included.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
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

    def main(  # type: ignore[override]
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


#: Modules that add commands to the root group; each exposes ``register(group)``.
COMMAND_MODULES = (
    "bootstrap.cli.inventory_cmds",
    "bootstrap.cli.run_cmds",
    "bootstrap.cli.doctor_cmd",
    "bootstrap.cli.bmc_cmds",
    "bootstrap.cli.lab_cmds",
    "bootstrap.cli.triton_cmds",
    "bootstrap.cli.size_cmd",
    "bootstrap.cli.image_cmds",
    "bootstrap.cli.provision_cmds",
)


@click.group(cls=RackctlGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="rackctl")
def cli() -> None:
    """rackctl: a rack of Dell PowerEdge servers from bare metal to serving LLMs.

    Exit codes: 0 ok, 1 something failed, 2 invalid input, 3 missing tool on this machine,
    4 stage not implemented yet, 130 interrupted.
    """


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(cli)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="rackctl")
