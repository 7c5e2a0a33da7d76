"""The parts of an inventory that parsed, so the cross-field rules run even where the schema failed elsewhere.

:func:`parsed_part` removes what the schema refused (the offending key, or the list item or mapping entry
holding it when the key is required) until the rest validates, and remembers where each kept list item was
in the file. :func:`original_path` turns a rule's path in that part (``nodes[2].ip``) back into the file's
(``nodes[3].ip`` when ``nodes[1]`` was removed), so every problem of a file is reported at once, each at
its own place. A rule finding about what was removed is left out (:func:`echoes_removal`: it would be the
schema error's echo).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from bootstrap.inventory.models import Inventory

#: rounds of removal before giving up (each round removes every refused part; a required key's absence
#: moves the removal one level up)
MAX_ROUNDS = 8
_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


@dataclass
class Part:
    """A valid inventory made of the parts of the file that parsed, and how to map its paths back."""

    inventory: Inventory
    data: Any
    origins: dict[int, list[int]] = field(default_factory=dict)  # id(list) -> file index of each kept item
    removed: set[str] = field(default_factory=set)  # names of removed mapping entries and nodes
    shortened: set[str] = field(default_factory=set)  # paths of the lists an item was removed from


def _remove(data: Any, loc: tuple[Any, ...], origins: dict[int, list[int]], removed: set[str], short: set[str]) -> bool:
    """Remove the deepest existing part along ``loc``; False when only the whole document is left."""
    path: list[tuple[Any, Any]] = []  # (container, key) down to the deepest existing part
    current = data
    for key in loc:
        in_dict = isinstance(current, dict) and key in current
        if in_dict or (isinstance(current, list) and isinstance(key, int) and 0 <= key < len(current)):
            path.append((current, key))
            current = current[key]
        elif not isinstance(key, str) or not path:
            break  # a key the data lacks ("missing"): remove its parent below
        else:
            continue  # a union or model tag in pydantic's location: not a data key
    if not path:
        return False
    container, key = path[-1]
    if isinstance(container, list):
        item = container.pop(key)
        short.add("".join(f"[{k}]" if isinstance(k, int) else f".{k}" for _, k in path[:-1]).lstrip("."))
        origins.setdefault(id(container), list(range(len(container) + 1))).pop(key)
        if isinstance(item, dict) and isinstance(item.get("hostname"), str):
            removed.add(item["hostname"])
    else:
        value = container.pop(key)
        if len(path) == 2 and isinstance(value, dict):  # a named entry: credentials.idrac, networks.mgmt
            removed.add(str(key))
    return True


def _order(loc: tuple[Any, ...]) -> tuple[tuple[int, int, str], ...]:
    """Sort key of a location: later list items last (removed first, so earlier indices stay valid)."""
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in loc)


def parsed_part(data: dict[str, Any], first: ValidationError) -> Part | None:
    """The largest valid part of ``data`` found by removing what the schema refused; None if none."""
    work = copy.deepcopy(data)
    origins: dict[int, list[int]] = {}
    removed: set[str] = set()
    short: set[str] = set()
    error = first
    for _ in range(MAX_ROUNDS):
        locs = sorted({tuple(e["loc"]) for e in error.errors(include_url=False)}, key=_order, reverse=True)
        for loc in locs:  # removing later list items first keeps earlier indices valid
            if not _remove(work, loc, origins, removed, short):
                return None
        try:
            return Part(Inventory.model_validate(work), work, origins, removed, short)
        except ValidationError as exc:
            error = exc
    return None


def original_path(part: Part, path: str) -> str:
    """A path in the part (``nodes[2].bmc``) as the file's (``nodes[3].bmc`` when one item before it went)."""
    out, current = "", part.data
    for match in _PART.finditer(path):
        index, key = match.group(1), match.group(2)
        if index is not None and isinstance(current, list) and int(index) < len(current):
            kept = part.origins.get(id(current))
            out += f"[{kept[int(index)] if kept else index}]"
            current = current[int(index)]
        elif index is not None:
            out += f"[{index}]"
            current = None
        else:
            out += f".{key}" if out else key
            current = current.get(key) if isinstance(current, dict) else None
    return out


def echoes_removal(part: Part, path: str, message: str) -> bool:
    """Whether a rule's finding is about what was removed: it names a removed entry or node, or it is about
    a whole list an item was removed from (counts such as the number of control planes)."""
    text = f"{path} {message}"
    return path in part.shortened or any(
        re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) for name in part.removed
    )
