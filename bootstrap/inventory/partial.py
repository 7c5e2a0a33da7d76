"""The parts of an inventory that parsed, so the cross-field rules run even where the schema failed elsewhere.

:func:`parsed_part` removes what the schema refused (the offending key, or the list item or mapping entry
holding it when the key is required) until the rest validates, and remembers where each kept list item was
in the file. A required key outside the lists (``cluster.name``, ``networks.oob``) is not removed with its
section, which would leave nothing to check: it is stood in for by the shipped sample's value, so the rules
still run on every other section. :func:`original_path` turns a rule's path in that part (``nodes[2].ip``)
back into the file's (``nodes[3].ip`` when ``nodes[1]`` was removed), so every problem of a file is
reported at once, each at its own place. A rule finding about what was removed or stood in for is left out
(:func:`echoes_removal`: it would be the schema error's echo).
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from bootstrap.inventory.models import Inventory
from bootstrap.resources import examples_dir

#: rounds of removal before giving up (each round removes every refused part; a required key's absence
#: moves the removal one level up)
MAX_ROUNDS = 8
_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")
#: top-level mappings of named entries: a finding naming an entry whose part was refused is that refusal's echo
NAMED_SECTIONS = ("networks", "credentials", "hardware_models", "bios_profiles")
#: the sample whose values stand in for a refused required key outside the lists
STAND_IN = "dvd-inference.yml"


@dataclass
class Part:
    """A valid inventory made of the parts of the file that parsed, and how to map its paths back."""

    inventory: Inventory
    data: Any
    origins: dict[int, list[int]] = field(default_factory=dict)  # id(list) -> file index of each kept item
    removed: set[str] = field(default_factory=set)  # names of removed mapping entries and nodes
    shortened: set[str] = field(default_factory=set)  # paths of the lists an item was removed from
    cut: set[str] = field(default_factory=set)  # paths (outside lists) removed or stood in for
    stand_ins: set[str] = field(default_factory=set)  # the sample's words put in for refused values


def _dotted(keys: list[Any]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")


def _note_cut(keys: list[Any], value: Any, part: Part) -> None:
    """Remember a removed or stood-in-for part outside the lists: its path, and its entry's name."""
    if any(isinstance(k, int) for k in keys):
        return  # inside a list: the item's own removal (or its name) covers it
    part.cut.add(_dotted(keys))
    if len(keys) >= 2 and keys[0] in NAMED_SECTIONS and keys[1] != "kubernetes":
        part.removed.add(str(keys[1]))
    if len(keys) == 1 and keys[0] in NAMED_SECTIONS and isinstance(value, dict):  # a whole section stood in
        part.removed.update(str(k) for k in value if k != "kubernetes")
    part.stand_ins.update(_words(value))


def _words(value: Any) -> set[str]:
    """The text values of a stand-in, long enough to be recognised in a finding's message."""
    if isinstance(value, dict):
        return set().union(*(_words(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_words(v) for v in value)) if value else set()
    return {value} if isinstance(value, str) and len(value) >= 4 else set()


@functools.cache
def _sample() -> Any:
    """The shipped sample, parsed once (None where it cannot be read); its values are copied, never changed."""
    try:
        return yaml.safe_load((examples_dir() / STAND_IN).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def _stand_in_value(loc: tuple[Any, ...]) -> tuple[list[str], Any] | None:
    """The shipped sample's value at ``loc`` (keys only, no list), or None where it has none."""
    current = _sample()
    keys: list[str] = []
    for key in loc:
        if not isinstance(key, str):
            return None
        if not isinstance(current, dict) or key not in current:
            return None
        keys.append(key)
        current = current[key]
    if not keys or isinstance(current, list):
        return None  # lists of entries (nodes, models) are never made up
    return keys, current


def _stand_in(data: Any, error: Any, part: Part) -> bool:
    """Put the sample's value where a required key outside the lists is missing; False if it cannot."""
    if error["type"] != "missing":
        return False
    found = _stand_in_value(tuple(error["loc"]))
    if found is None:
        return False
    keys, value = found
    parent = data
    for key in keys[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    if not isinstance(parent, dict) or keys[-1] in parent:
        return False
    parent[keys[-1]] = copy.deepcopy(value)
    _note_cut(keys, value, part)
    return True


def _remove(data: Any, loc: tuple[Any, ...], part: Part) -> bool:
    """Remove the deepest existing part along ``loc``; False when only the whole document is left."""
    origins, removed, short = part.origins, part.removed, part.shortened
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
        short.add(_dotted([k for _, k in path[:-1]]))
        origins.setdefault(id(container), list(range(len(container) + 1))).pop(key)
        if isinstance(item, dict) and isinstance(item.get("hostname"), str):
            removed.add(item["hostname"])
    else:
        value = container.pop(key)
        if len(path) == 2 and isinstance(value, dict):  # a named entry: credentials.idrac, networks.mgmt
            removed.add(str(key))
        _note_cut([k for _, k in path], None, part)
    return True


def _order(loc: tuple[Any, ...]) -> tuple[tuple[int, int, str], ...]:
    """Sort key of a location: later list items last (removed first, so earlier indices stay valid)."""
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in loc)


def parsed_part(data: dict[str, Any], first: ValidationError) -> Part | None:
    """The largest valid part of ``data`` found by removing what the schema refused; None if none."""
    work = copy.deepcopy(data)
    part = Part(Inventory.model_construct(), work)
    error = first
    for _ in range(MAX_ROUNDS):
        errors = error.errors(include_url=False)
        stood_in = {tuple(e["loc"]) for e in errors if _stand_in(work, e, part)}
        locs = sorted({tuple(e["loc"]) for e in errors} - stood_in, key=_order, reverse=True)
        for loc in locs:  # removing later list items first keeps earlier indices valid
            if not _remove(work, loc, part):
                return None
        try:
            part.inventory = Inventory.model_validate(work)
            return part
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
    """Whether a rule's finding is about what was removed or stood in for: it is at or below such a path,
    names a removed entry or node or a stood-in value, or it is about a whole list an item was removed from
    (counts such as the number of control planes)."""
    text = f"{path} {message}"
    words = part.removed | part.stand_ins
    return (
        path in part.shortened
        or any(path == cut or path.startswith((f"{cut}.", f"{cut}[")) for cut in part.cut)
        or any(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) for word in words)
    )
