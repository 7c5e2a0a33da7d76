"""Shared CLI plumbing: ``--json``, output, errors as messages with documented exit codes."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.text import Text

from bootstrap.environment import Environment, available, load_environment
from bootstrap.errors import EXIT_INTERRUPTED, RackctlError
from redfish_tools.errors import RedfishError
from redfish_tools.secrets import redact

F = TypeVar("F", bound=Callable[..., Any])

#: Human output goes to stderr when --json is used, so stdout stays one JSON document.
#: ``emoji=False``: data such as a fingerprint example ``AB:CD:...`` must never become an emoji (":CD:").
console = Console(stderr=False, highlight=False, soft_wrap=True, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def stamp(iso: str | None) -> str:
    """A journal timestamp for a person: UTC to the second (``2026-11-29T13:37:55Z``), never cut; ``--json``
    keeps the journal's own (microseconds, offset). Text that is not a timestamp is returned as it is."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if moment.tzinfo is not None else "")


def cut_text(text: str, room: int) -> str:
    """The start of ``text`` in ``room`` characters: at a word boundary, unless that keeps under two thirds of
    the room (a long path or name is then cut inside)."""
    if len(text) <= room:
        return text
    start = text[:room]
    words = start.rsplit(" ", 1)[0].rstrip(",;:( ")
    return words if len(words) * 3 >= room * 2 else start


class Notes:
    """Texts too long for a table's free-text cell: the cell keeps their start and a reference (``… [2]``),
    :meth:`show` writes each whole once below the table, wrapped at the terminal's width.

    ``room``: the characters the other columns take (each column's border and padding are counted here)."""

    def __init__(self, room: int, columns: int) -> None:
        self.limit = max(10, console.width - room - 3 * columns - 1)
        self.texts: dict[str, int] = {}

    def cell(self, text: str) -> str:
        """``text`` escaped for the cell, or its start and a reference when it is longer than the cell."""
        if len(text) <= self.limit:
            return escape(text)
        ref = self.texts.setdefault(text, len(self.texts) + 1)
        tail = f" … [{ref}]"
        return escape(cut_text(text, self.limit - len(tail)) + tail)

    def show(self) -> None:
        """Each cut text whole, once, after its reference."""
        for text, ref in self.texts.items():
            console.print(f"{escape(f'[{ref}]')} {escape(text)}", soft_wrap=False)


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout."""
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def say_item(out: Console, label: str, text: str, *, style: str = "") -> None:
    """``label`` (markup) then ``text`` (plain): on a terminal wrapped at its width, each further line under
    the text's first column (words kept whole, a long path on a line of its own); piped, one line, for grep
    and logs. ``style``: the text's."""
    head = Text.from_markup(label)
    if not out.is_terminal or head.cell_len + len(text) <= out.width:
        out.print(head + Text(text, style=style), soft_wrap=True)
        return
    lines = textwrap.wrap(
        text,
        width=max(20, out.width - head.cell_len),
        break_long_words=False,
        break_on_hyphens=False,
    )
    out.print(head + Text(lines[0], style=style), soft_wrap=True)
    for line in lines[1:]:
        out.print(Text(" " * head.cell_len) + Text(line, style=style), soft_wrap=True)


def warn(message: str, as_json: bool) -> None:
    """Say ``message`` once per command: on stderr now, or in the ``warnings`` of the ``--json`` document."""
    said = command_warnings()
    if message in said:
        return
    said.append(message)
    if not as_json:
        say_item(err_console, "[bold yellow]warning:[/bold yellow] ", message)


def command_warnings() -> list[str]:
    """The warnings said so far by this command (kept on the root click context)."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().meta.setdefault("rackctl.warnings", []) if ctx else []


def emit(data: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], None]) -> None:
    """Print ``data`` as JSON (with this command's warnings), or hand it to ``human`` to render it with rich."""
    if as_json:
        said = command_warnings()
        emit_json({**data, "warnings": [*data.get("warnings", []), *said]} if said else data)
    else:
        human(data)


def handle_errors(as_json_param: str = "as_json") -> Callable[[F], F]:
    """Turn :class:`RackctlError` into a message and its exit code; never show a traceback.

    With ``--json`` the error is printed as ``{"ok": false, "errors": [...]}`` on stdout.
    """

    def deco(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            as_json = bool(kwargs.get(as_json_param))
            try:
                return func(*args, **kwargs)
            except (RackctlError, RedfishError) as exc:
                report_error(exc, as_json)  # type: ignore[arg-type]
                sys.exit(exc.exit_code)
            except KeyboardInterrupt:
                if as_json:
                    emit_json({"ok": False, "error": "interrupted (Ctrl-C)", "exit_code": EXIT_INTERRUPTED})
                else:
                    err_console.print("[red]interrupted[/red]")
                sys.exit(EXIT_INTERRUPTED)

        return wrapper  # type: ignore[return-value]

    return deco


def report_error(exc: RackctlError, as_json: bool) -> None:
    """Print an error (and its problems) for a person or a script; registered secrets are masked."""
    if as_json:
        problems = [p.as_dict() for p in exc.problems] or [{"path": "", "message": exc.message}]
        clean = [{k: redact(v) if isinstance(v, str) else v for k, v in p.items()} for p in problems]
        said = {"warnings": command_warnings()} if command_warnings() else {}
        emit_json({"ok": False, "error": redact(exc.message), "exit_code": exc.exit_code, "errors": clean, **said})
        return
    say_item(err_console, "[bold red]error:[/bold red] ", redact(exc.message))
    for problem in exc.problems:
        say_item(err_console, "  - ", redact(str(problem)))


def escape(text: str) -> str:
    """Escape rich markup in user-provided text."""
    return rich_escape(text)


def environment_for(inventory: Any) -> Environment:
    """The run's environment: ``--env``/``$RACKCTL_ENV``; else ``lab`` for a lab inventory when the lab is
    installed; else the host (a real head node)."""

    ctx = click.get_current_context(silent=True)
    name = ((ctx.find_root().obj or {}) if ctx else {}).get("env_name")
    if name is None and getattr(getattr(inventory, "cluster", None), "lab", False) and "lab" in available():
        name = "lab"
    return load_environment(name)


@contextlib.contextmanager
def phases(title: str, *, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """Progress of a long step made of phases: yields ``step(message)``, called as each phase starts.

    On a terminal a spinner shows the phase and when it started (``[1:05] compressing``); piped, a line per
    phase goes to stderr with the seconds since the start, so a slow step is told from a hung one in a log
    too. ``quiet`` (``--json``) prints nothing.
    """
    start = time.monotonic()

    def stamp() -> str:
        spent = int(time.monotonic() - start)
        return f"[{spent // 60}:{spent % 60:02d}]"

    if quiet:
        yield lambda _message: None
        return
    if not err_console.is_terminal:
        err_console.print(f"{stamp()} {rich_escape(title)}")
        yield lambda message: err_console.print(f"{stamp()} {rich_escape(message)}")
        err_console.print(f"{stamp()} done")
        return
    with err_console.status(f"{rich_escape(title)}...", spinner="dots") as status:
        yield lambda message: status.update(f"{stamp()} {rich_escape(message)}...")
