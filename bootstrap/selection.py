"""The one grammar for choosing nodes (``--limit``) and stages (``--stages``) on every command.

A selection is comma-separated: hostnames (``cp-01``), shell globs (``gpu-*``) or roles (``worker``) for
nodes; stage names for stages. An option that is not given selects everything; an option given with
nothing in it (``''``, ``','``, ``' , '``) is refused, as is a name that matches nothing (with the closest
names offered). Errors are :class:`InvalidInput` (exit 2) naming the option, the value and the fix.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

from bootstrap.errors import InvalidInput, Problem

LIMIT_OPTION = "--limit"
STAGES_OPTION = "--stages"
LIMIT_HELP = "Comma-separated hostnames, globs (gpu-*) or roles (worker); default: every node."


def split_csv(value: str | Iterable[str] | None, option: str = LIMIT_OPTION) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None`` -> ``[]`` (not given: everything).

    A value that was given but names nothing (``''``, ``','``) is refused: it would otherwise silently
    mean "everything". Several values (a repeated option, positional arguments) are joined first.
    """
    if value is None:
        return []
    parts = [value] if isinstance(value, str) else list(value)
    if not parts:
        return []
    items = [item.strip() for part in parts for item in part.split(",") if item.strip()]
    if not items:
        shown = ",".join(parts)
        raise InvalidInput(
            f"{option} {shown!r} selects nothing",
            problems=[
                Problem(
                    option,
                    f"{shown!r} is empty",
                    f"name at least one, comma-separated (e.g. {_example(option)}), or leave {option} out "
                    "to select everything",
                )
            ],
        )
    return items


def _example(option: str) -> str:
    return "discover,bios" if option == STAGES_OPTION else "cp-01,gpu-*,worker"


def role_of(node: Any) -> str:
    """A node's role as text (enum or string)."""
    role = getattr(node, "role", "")
    return str(getattr(role, "value", role))


def match_nodes(inventory: Any, patterns: Sequence[str], option: str = LIMIT_OPTION) -> list[str]:
    """Hostnames (in inventory order) matched by ``patterns``; all nodes when ``patterns`` is empty.

    Every pattern must match at least one node: unknown ones are refused together, each with the closest
    hostnames or roles as the fix.
    """
    nodes = list(inventory.nodes)
    if not patterns:
        return [n.hostname for n in nodes]
    matched: set[str] = set()
    problems: list[Problem] = []
    unmatched: list[str] = []
    names = [n.hostname for n in nodes]
    roles = sorted({role_of(n) for n in nodes})
    for pattern in patterns:
        hits = {n.hostname for n in nodes if fnmatch.fnmatchcase(n.hostname, pattern) or role_of(n) == pattern}
        if not hits:
            unmatched.append(pattern)
            close = difflib.get_close_matches(pattern, [*names, *roles], n=3, cutoff=0.75)
            listed = ", ".join(names[:10]) + (" …" if len(names) > 10 else "")
            fix = f"use one of: {listed} (or a glob, or a role: {', '.join(roles)})"
            if close:
                fix = f"did you mean {' or '.join(repr(c) for c in close)}? " + fix
            problems.append(Problem(option, f"{pattern!r} matches no node", fix))
        matched |= hits
    if problems:
        shown = ", ".join(repr(p) for p in unmatched)
        raise InvalidInput(f"{option} {shown} matches no node in the inventory", problems=problems)
    return [n for n in names if n in matched]


def select_nodes(inventory: Any, limit: str | Iterable[str] | None, option: str = LIMIT_OPTION) -> list[Any]:
    """Inventory nodes selected by a ``--limit`` value (``None``: every node)."""
    chosen = set(match_nodes(inventory, split_csv(limit, option), option))
    return [n for n in inventory.nodes if n.hostname in chosen]


def check_stages(names: Sequence[str], known: Sequence[str], option: str = STAGES_OPTION) -> list[str]:
    """``names`` in ``known``'s order; unknown names refused with the closest stage offered."""
    problems = []
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
            fix = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            problems.append(
                Problem(option, f"{name!r} is not a stage", f"{fix} stages are: {', '.join(known)}".strip())
            )
    if problems:
        unknown = ", ".join(repr(n) for n in names if n not in known)
        raise InvalidInput(f"unknown stage(s): {unknown}; stages are: {', '.join(known)}", problems=problems)
    return [s for s in known if s in names]
