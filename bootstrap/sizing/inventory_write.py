"""Store a sizing result under the inventory's top-level ``sizing:`` key, keeping the rest of the file.

Only the ``sizing:`` block's lines change (:mod:`bootstrap.inventory.yamledit`): comments, indentation and
quoting of everything else stay as they were; the file is replaced atomically.
:func:`plan_sizing_write` returns the new text and a unified diff (``--dry-run``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.sizing_spec import SizingSection
from bootstrap.inventory.yamledit import YamlEditor

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


def plan_sizing_write(path: Path, section: SizingSection) -> SizingWrite:
    """Compute the inventory text with ``sizing:`` set to ``section`` (added last, or replaced in place)."""
    if not path.exists():
        raise InvalidInput(
            f"inventory {path} does not exist",
            problems=[Problem("-i/--inventory", str(path), "create it first (rackctl init) or point -i at it")],
        )
    editor = YamlEditor.load(path)
    editor.set_top_level(SIZING_KEY, section.model_dump(mode="json", exclude_none=True))
    return SizingWrite(path, editor.original, editor.text)


def apply_sizing_write(plan: SizingWrite) -> bool:
    """Write the planned text atomically (keeping the file's mode); False when nothing changed."""
    if not plan.changed:
        return False
    mode = plan.path.stat().st_mode & 0o777
    atomic_write_text(plan.path, plan.new_text, mode=mode)
    return True
