"""Store a sizing result under the inventory's top-level ``sizing:`` key, keeping the rest of the file.

ruamel.yaml's round-trip mode keeps comments, key order and quoting of everything else; the file is
replaced atomically. :func:`plan_sizing_write` returns the new text and a unified diff (``--dry-run``).
"""

from __future__ import annotations

import difflib
import io
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from bootstrap.errors import InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text
from bootstrap.sizing.spec import SizingSection

SIZING_KEY = "sizing"


@dataclass(frozen=True)
class SizingWrite:
    """What ``--write`` would change."""

    path: Path
    old_text: str
    new_text: str

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.old_text.splitlines(keepends=True),
                self.new_text.splitlines(keepends=True),
                fromfile=f"{self.path} (now)",
                tofile=f"{self.path} (with sizing)",
            )
        )


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 110
    return yaml


def plan_sizing_write(path: Path, section: SizingSection) -> SizingWrite:
    """Compute the inventory text with ``sizing:`` set to ``section`` (added last, or replaced in place)."""
    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(
            f"inventory {path} does not exist",
            problems=[
                Problem("-i/--inventory", str(path), "create it first (rackctl init) or point -i at it")
            ],
        ) from None
    yaml = _yaml()
    try:
        doc = yaml.load(old)
    except YAMLError as exc:
        raise InvalidInput(
            f"inventory {path} is not valid YAML",
            problems=[Problem(str(path), str(exc).splitlines()[0], "fix the YAML syntax first")],
        ) from None
    if doc is None:
        doc = yaml.load("{}")
    if not hasattr(doc, "keys"):
        raise InvalidInput(
            f"inventory {path} is not a mapping",
            problems=[
                Problem("", f"top level is a {type(doc).__name__}", "the inventory must be a YAML mapping")
            ],
        )
    doc[SIZING_KEY] = section.model_dump(mode="json", exclude_none=True)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return SizingWrite(path, old, buf.getvalue())


def apply_sizing_write(plan: SizingWrite) -> bool:
    """Write the planned text atomically (keeping the file's mode); False when nothing changed."""
    if not plan.changed:
        return False
    mode = plan.path.stat().st_mode & 0o777
    atomic_write_text(plan.path, plan.new_text, mode=mode)
    return True
