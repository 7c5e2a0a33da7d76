"""Progress from a long-running tool's own output: the lines it prints as it works become progress
messages, so that no step that takes minutes (debootstrap, apt's downloads) is silent.

:func:`run_lines` runs a tool and hands each line of its output to a callback as it comes;
:class:`Milestones` turns a stream of per-item lines into few messages: the first line of each kind (a new
verb: ``Retrieving``, ``Extracting``, ...) and every ``every``-th item of the same kind, with the count.
"""

from __future__ import annotations

import os
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from redfish_tools.secrets import redact

#: the lines of output kept for an error message
TAIL_LINES = 40


def run_lines(
    argv: Sequence[str],
    on_line: Callable[[str], None],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[int, str]:
    """Run ``argv`` (stdin closed, stderr merged into stdout), calling ``on_line`` with each output line as it
    is printed; returns the exit status and the last lines of output (for an error message)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=dict(env) if env is not None else dict(os.environ),
        cwd=cwd,
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            on_line(line)
        rc = proc.wait()
    return rc, "\n".join(tail)


class Milestones:
    """Per-item lines to few progress messages: each new kind of line, then every ``every``-th of a kind.

    ``parse(line)`` gives a line's kind and what to say of it (None: not an item, ignored); ``say(message)``
    reports it, redacted (a mirror's URL may carry a password).
    """

    def __init__(
        self,
        say: Callable[[str], None],
        parse: Callable[[str], tuple[str, str] | None],
        *,
        prefix: str = "",
        every: int = 25,
        total: int | None = None,
    ) -> None:
        self.say, self.parse, self.prefix, self.every, self.total = say, parse, prefix, every, total
        self.kind: str | None = None
        self.count = 0

    def __call__(self, line: str) -> None:
        parsed = self.parse(line)
        if parsed is None:
            return
        kind, text = parsed
        if kind != self.kind:
            self.kind, self.count = kind, 0
        self.count += 1
        if self.count == 1 or self.count % self.every == 0:
            of = f" of {self.total}" if self.total else ""
            number = f" ({self.count}{of})" if self.total or self.count > 1 else ""
            self.say(redact(f"{self.prefix}{text}{number}"))


def debootstrap_line(line: str) -> tuple[str, str] | None:
    """One line of debootstrap's output: an ``I:`` line's verb (``Retrieving``, ``Validating``, ``Extracting``,
    ``Unpacking``, ...) and its text, a warning as kind ``W``; None for anything else."""
    if line.startswith("W: "):
        return "W", line.strip()
    if not line.startswith("I: "):
        return None
    text = line[3:].strip()
    return (text.split()[0], text) if text else None


ARCHES = frozenset({"all", "amd64", "arm64", "i386"})


def apt_download_line(line: str) -> tuple[str, str] | None:
    """apt's ``Get:N <uri> [<suite>/<component>] [<arch>] <package> [<arch>] <version> [<size>]`` line (one per
    file fetched) as kind ``Get`` and ``<package> <version>``; None for anything else."""
    if not line.startswith("Get:"):
        return None
    words = line.split("[", 1)[0].split()[2:]  # without Get:N, the URI and the size
    kept = [w for w in words if w not in ARCHES and "/" not in w]
    return "Get", " ".join(kept[-2:])
