"""The options commands share, as click decorators: ``@flags.json``, ``@flags.inventory``, ``@flags.plan(...)``.

One place for each option's spelling, default, environment variable and help, so every command that takes it
takes it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from bootstrap.selection import LIMIT_HELP

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_INVENTORY = Path("inventory/cluster.yml")


def json(func: F) -> F:
    """Add ``--json``: print one machine-readable JSON document on stdout instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")(func)


def inventory(func: F) -> F:
    """Add ``-i/--inventory`` (default ``inventory/cluster.yml`` or ``$RACKCTL_INVENTORY``)."""
    return click.option(
        "-i",
        "--inventory",
        "inventory_path",
        type=click.Path(path_type=Path, dir_okay=False),
        envvar="RACKCTL_INVENTORY",
        show_envvar=True,
        default=DEFAULT_INVENTORY,
        show_default=True,
        help="Cluster inventory YAML.",
    )(func)


def state_dir(func: F) -> F:
    """Add ``--state-dir`` where the run journal and derived artefacts live."""
    return click.option(
        "--state-dir",
        type=click.Path(path_type=Path, file_okay=False),
        envvar="RACKCTL_STATE_DIR",
        show_envvar=True,
        default=Path(".rackctl"),
        show_default=True,
        help="Directory for the run journal and rendered artefacts.",
    )(func)


class AliasedOption(click.Option):
    """An option whose last long name is an old spelling: still accepted, not shown in ``--help``."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        return (record[0].replace(f", {self.opts[-1]}", "", 1), record[1]) if record else None


def plan(help_text: str, dest: str = "plan_only") -> Callable[[F], F]:
    """Add ``--plan`` (hidden alias ``--dry-run``): show what the command would do, do nothing."""
    return click.option("--plan", "--dry-run", dest, cls=AliasedOption, is_flag=True, help=help_text)


def limit(func: F) -> F:
    """Add ``--limit``: the one node selection grammar (:mod:`bootstrap.selection`)."""

    return click.option("--limit", "limit", metavar="NODES", default=None, help=LIMIT_HELP)(func)


def nodes(func: F) -> F:
    """Add ``-i/--inventory``, ``--state-dir`` and ``--limit``, in that order: the nodes a command works on."""
    return inventory(state_dir(limit(func)))


def seconds(
    flag: str, dest: str, *, minimum: float, default: float | None, help_text: str, metavar: str = "S"
) -> Callable[[F], F]:
    """Add ``FLAG S``: a number of seconds, at least ``minimum``; a ``default`` is shown in ``--help``, None
    leaves it to the stage (``help_text`` then says what it is)."""
    return click.option(
        flag,
        dest,
        type=click.FloatRange(min=minimum),
        default=default,
        show_default=default is not None,
        metavar=metavar,
        help=help_text,
    )


def directory(flag: str, dest: str, help_text: str, *, must_exist: bool = False) -> Callable[[F], F]:
    """An optional ``FLAG DIR``; ``must_exist``: click refuses a path that is not an existing directory (else
    the command checks it, e.g. :func:`bootstrap.stages.cluster_inputs.checked_inputs`)."""
    kind = click.Path(path_type=Path, file_okay=False, exists=True) if must_exist else click.Path(path_type=Path)
    return click.option(flag, dest, type=kind, default=None, metavar="DIR", help=help_text)


def out(sub: str, what: str) -> Callable[[F], F]:
    """Add ``-o/--out`` (a directory) whose default is ``<state-dir>/<sub>``: resolve it with :func:`out_dir`."""
    return click.option(
        "-o",
        "--out",
        "out_dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help=f"{what} (default: <state-dir>/{sub}).",
    )


def out_dir(out: Path | None, state_dir: Path, sub: str) -> Path:
    """``--out`` as given, else ``<state-dir>/<sub>``."""
    return out if out is not None else Path(state_dir) / sub
