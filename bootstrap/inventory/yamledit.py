"""Edit a user's YAML file in place: change exactly the text that must change, nothing else.

A round-trip dump re-indents, re-wraps and re-quotes a file whose layout differs from the dumper's
settings. Instead, :class:`YamlEditor` composes the text (ruamel keeps the exact start and end of every
node), replaces only the span of the value being set (keeping its quoting style) or inserts one entry,
then re-parses the result and checks that it means the old document with exactly that change. Comments,
indentation, quoting and long or folded strings elsewhere are untouched.

    editor = YamlEditor.load(path)
    editor.set_scalar(("nodes", 0, "interfaces", 1, "mac"), "b0:7b:25:00:00:01")
    editor.set_top_level("sizing", {...})
    editor.save()                        # atomic, keeps the file's mode
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from bootstrap.errors import InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text

Key = str | int
Scalar = str | int | float | bool | None


class YamlEditor:
    """The text of one YAML document and surgical edits to it."""

    def __init__(self, text: str, path: Path | None = None) -> None:
        self.path = path
        self.original = text
        self.text = text
        self._where = str(path) if path else "YAML"
        self._root()  # refuse a file that does not parse, before any edit

    @classmethod
    def load(cls, path: Path) -> YamlEditor:
        """Read ``path`` (a clear error when it is missing)."""
        try:
            return cls(path.read_text(encoding="utf-8"), path)
        except FileNotFoundError:
            raise InvalidInput(
                f"{path} does not exist",
                problems=[Problem(str(path), "no such file", "create it first (rackctl init) or point -i at it")],
            ) from None

    @property
    def changed(self) -> bool:
        return self.text != self.original

    # -- edits ---------------------------------------------------------------------------------------
    def set_scalar(self, path: Sequence[Key], value: Scalar) -> bool:
        """Set the scalar at ``path`` (the last key is added to its mapping when absent); False if same."""
        parent = self._node_at(path[:-1])
        key = path[-1]
        if isinstance(parent, SequenceNode):
            if not isinstance(key, int) or not 0 <= key < len(parent.value):
                raise self._refuse(path, "no such list item", "point at an existing item")
            target: Node | None = parent.value[key]
        elif isinstance(parent, MappingNode):
            target = next((v for k, v in parent.value if k.value == key), None)
        else:
            raise self._refuse(path, "the parent is a scalar", "point at a key of a mapping")
        if target is not None and not isinstance(target, ScalarNode):
            raise self._refuse(path, "the value is a list or mapping", "set a scalar")
        if target is not None and _lookup(_plain(self.text), path) == value:
            return False
        if target is None:
            assert isinstance(parent, MappingNode)
            new_text = self._insert_key(parent, str(key), value, path)
        else:
            start, end = target.start_mark.index, target.end_mark.index
            new_text = (
                self.text[:start] + _render(value, target.style, flow=_in_flow(self.text, start)) + self.text[end:]
            )
        self._commit(new_text, path, value)
        return True

    def set_top_level(self, key: str, value: Any) -> bool:
        """Set a top-level ``key`` to ``value`` (any YAML data): its block is replaced, or appended last."""
        root = self._root()
        if not isinstance(root, MappingNode) and root is not None:
            raise InvalidInput(
                f"{self._where} is not a mapping",
                problems=[Problem("", f"top level is a {type(root).__name__}", "the file must be a YAML mapping")],
            )
        block = _dump_block({key: value})
        lines = self.text.splitlines(keepends=True)
        pairs = list(root.value) if root is not None else []
        index = next((i for i, (k, _) in enumerate(pairs) if k.value == key), None)
        if index is None:
            head = self.text if not self.text or self.text.endswith("\n") else self.text + "\n"
            new_text = head + block
        else:
            first = pairs[index][0].start_mark.line
            last = pairs[index + 1][0].start_mark.line if index + 1 < len(pairs) else len(lines)
            while last > first + 1 and (not lines[last - 1].strip() or lines[last - 1].lstrip().startswith("#")):
                last -= 1  # comments and blank lines before the next key belong to it
            if "".join(lines[first:last]) == block:
                return False
            new_text = "".join(lines[:first]) + block + "".join(lines[last:])
        self._commit(new_text, (key,), value)
        return True

    def save(self, path: Path | None = None) -> Path:
        """Write the text atomically (temp file + rename), keeping the existing file's mode."""
        target = path or self.path
        if target is None:
            raise ValueError("no path to save to")
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
        return atomic_write_text(target, self.text, mode=mode)

    # -- internals -----------------------------------------------------------------------------------
    def _root(self, text: str | None = None) -> Node | None:
        try:
            return YAML(typ="rt").compose(text if text is not None else self.text)
        except YAMLError as exc:
            raise InvalidInput(
                f"{self._where} is not valid YAML",
                problems=[Problem(self._where, str(exc).splitlines()[0], "fix the YAML syntax first")],
            ) from None

    def _node_at(self, path: Sequence[Key]) -> Node:
        node = self._root()
        for depth, key in enumerate(path):
            if isinstance(node, MappingNode):
                node = next((v for k, v in node.value if k.value == key), None)
            elif isinstance(node, SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
                node = node.value[key]
            else:
                node = None
            if node is None:
                raise self._refuse(path[: depth + 1], "not found", "check the path")
        assert node is not None
        return node

    def _insert_key(self, mapping: MappingNode, key: str, value: Scalar, path: Sequence[Key]) -> str:
        text = self.text
        if mapping.flow_style:
            close = text.rindex("}", mapping.start_mark.index, mapping.end_mark.index)
            before = text[:close].rstrip()
            sep = "" if before.endswith("{") else ", "
            entry = f"{sep}{key}: {_render(value, None, flow=True)}"
            return before + entry + (" " if text[len(before) : close].startswith(" ") else "") + text[close:]
        if not mapping.value:
            raise self._refuse(path, "the mapping is empty", "add the key by hand")
        last_value = mapping.value[-1][1]
        if not isinstance(last_value, ScalarNode) or last_value.start_mark.line != last_value.end_mark.line:
            raise self._refuse(path, "cannot place a new key after a multi-line value", "add it by hand")
        column = mapping.value[0][0].start_mark.column
        eol = text.find("\n", last_value.end_mark.index)
        eol = len(text) if eol < 0 else eol
        return text[:eol] + "\n" + " " * column + f"{key}: {_render(value, None, flow=False)}" + text[eol:]

    def _commit(self, new_text: str, path: Sequence[Key], value: Any) -> None:
        """Accept ``new_text`` only if it parses to the old document with exactly this change."""
        expected = _plain(self.text)
        _assign(expected, path, value)
        try:
            got = _plain(new_text)
        except YAMLError:
            got = None
        if got != expected:
            raise self._refuse(path, "an in-place edit would change the meaning of the file", "edit it by hand")
        self.text = new_text

    def _refuse(self, path: Sequence[Key], message: str, fix: str) -> InvalidInput:
        where = ".".join(str(p) for p in path)
        return InvalidInput(f"cannot edit {where} in {self._where}: {message}", problems=[Problem(where, message, fix)])


def _plain(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def _assign(doc: Any, path: Sequence[Key], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = copy.deepcopy(value)


def _lookup(doc: Any, path: Sequence[Key]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _in_flow(text: str, index: int) -> bool:
    """True when ``index`` is inside a flow collection (``{...}`` or ``[...]``) on its line."""
    line_start = text.rfind("\n", 0, index) + 1
    prefix = text[line_start:index]
    return prefix.count("{") + prefix.count("[") > prefix.count("}") + prefix.count("]")


def _render(value: Any, style: str | None, *, flow: bool) -> str:
    """``value`` as YAML scalar text in ``style`` ('"', "'" or plain), plain only where it reads back the same."""
    if not isinstance(value, str):
        return json.dumps(value)
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    if style is None and _plain_is_safe(value, flow=flow):
        return value
    return json.dumps(value)


def _plain_is_safe(value: str, *, flow: bool) -> bool:
    if not value or ":" in value or "#" in value or value != value.strip():
        return False  # ':' keeps MACs and times away from YAML 1.1 sexagesimal readers
    doc = f"{{v: {value}}}" if flow else f"v: {value}\n"
    try:
        return _plain(doc) == {"v": value}
    except YAMLError:
        return False


def _dump_block(data: dict[str, Any]) -> str:
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()
