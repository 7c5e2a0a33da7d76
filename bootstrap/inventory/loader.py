"""Read an inventory file: YAML with duplicate-key detection, then the models, then the rules.

Every failure becomes a :class:`~bootstrap.errors.Problem` with the YAML path, the line, the value
and the fix; all of them are collected and raised together as one :class:`InvalidInput`.

Hostile input is refused before it can cost much:

* only a regular file is read, checked with ``os.stat`` and opened ``O_NONBLOCK`` (a FIFO never
  blocks), at most :data:`MAX_BYTES` bytes, UTF-8 only (a bad byte is named by its offset);
* YAML aliases may add at most :data:`MAX_ALIAS_NODES` values when expanded (an alias bomb expands
  exponentially in anything that walks the document: the line map, the models), and may not form a
  cycle; plain anchors and aliases stay allowed, since PyYAML's ``dump`` writes them for shared objects;
* nesting deeper than :data:`MAX_DEPTH` (aliases' included) is refused (no ``RecursionError``).

Both YAML checks run on the parser's event stream, which is flat (no recursion, no expansion).
"""

from __future__ import annotations

import errno
import os
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.partial import echoes_removal, original_path, parsed_part
from bootstrap.inventory.rules import run_rules
from bootstrap.inventory.suggest import did_you_mean

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SECRET_WORDS = ("password", "passwd", "secret", "token")
#: deepest nesting of mappings/sequences accepted (a real inventory needs about 8)
MAX_DEPTH = 64
#: largest inventory file read (a 1000-node inventory is well under 1 MiB)
MAX_BYTES = 32 * 1024 * 1024
#: most nodes that aliases may add to the document when expanded (an alias bomb adds billions)
MAX_ALIAS_NODES = 100_000
_ALIAS_FIX = "write the values out in full, or use fewer aliases (*name) of large anchored (&name) parts"
_DEPTH_FIX = "an inventory is a few levels deep; check for runaway brackets ([ or {)"


class _UniqueKeyLoader(_BaseLoader):
    """Safe loader that refuses duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                ) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key] + 1}); remove one of them",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


@dataclass
class LoadResult:
    """A valid inventory and the warnings found while checking it."""

    inventory: Inventory
    warnings: list[Problem] = field(default_factory=list)


def _yaml_problem(source: str, message: str, fix: str, line: int | None) -> InvalidInput:
    return InvalidInput(f"{source} is not valid YAML", problems=[Problem("", message, fix, line)])


@dataclass
class _Frame:
    """An open mapping/sequence while scanning events: its expanded size and height so far."""

    anchor: str | None
    size: int = 1
    height: int = 0


def _structure_problem(source: str, title: str, message: str, fix: str, line: int | None) -> InvalidInput:
    return InvalidInput(f"{source} {title}", problems=[Problem("", message, fix, line)])


def check_structure(text: str, source: str = "<inventory>") -> None:
    """Bound the work of a document from the flat event stream, before anything walks it.

    Aliases are allowed (PyYAML's own ``dump`` writes them for shared objects) but what they expand to
    is counted: at most :data:`MAX_ALIAS_NODES` added nodes, no alias to an anchor that is still open
    (a cycle), and nesting (aliases' included) at most :data:`MAX_DEPTH` deep.
    """
    anchors: dict[str, tuple[int, int]] = {}  # name -> (expanded size, height)
    stack: list[_Frame] = []
    added = 0

    def close(size: int, height: int) -> None:
        if stack:
            stack[-1].size += size
            stack[-1].height = max(stack[-1].height, height)

    for event in yaml.parse(text, Loader=_BaseLoader):
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:
                if any(f.anchor == event.anchor for f in stack):
                    raise _structure_problem(
                        source,
                        "has a recursive alias",
                        f"alias *{event.anchor} points into itself",
                        "an inventory is a tree: remove the alias",
                        line,
                    )
                continue  # undefined: the composer names it
            size, height = anchors[event.anchor]
            added += size
            if added > MAX_ALIAS_NODES:
                raise _structure_problem(
                    source,
                    "expands aliases too far",
                    f"aliases expand to more than {MAX_ALIAS_NODES} values (at *{event.anchor})",
                    _ALIAS_FIX,
                    line,
                )
            if len(stack) + height > MAX_DEPTH:
                raise _structure_problem(
                    source,
                    "is nested too deeply",
                    f"more than {MAX_DEPTH} levels of nested mappings/lists (with *{event.anchor})",
                    _DEPTH_FIX,
                    line,
                )
            close(size, height)
        elif isinstance(event, yaml.CollectionStartEvent):
            stack.append(_Frame(event.anchor))
            if len(stack) > MAX_DEPTH:
                raise _structure_problem(
                    source,
                    "is nested too deeply",
                    f"more than {MAX_DEPTH} levels of nested mappings/lists",
                    _DEPTH_FIX,
                    line,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            frame = stack.pop()
            if frame.anchor is not None:
                anchors[frame.anchor] = (frame.size, frame.height + 1)
            close(frame.size, frame.height + 1)
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
            close(1, 0)


def load_yaml(text: str, source: str = "<inventory>") -> Any:
    """Parse YAML text; syntax errors, duplicate keys, aliases and deep nesting raise :class:`InvalidInput`."""
    try:
        check_structure(text, source)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{context}, {problem}" if context else str(problem)
        raise _yaml_problem(source, message, "fix the YAML syntax at that line", line) from None
    except RecursionError:  # a backstop: check_structure bounds the depth first
        raise _yaml_problem(
            source, "nested too deeply", "an inventory is a few levels deep; check for runaway brackets", None
        ) from None


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _unreadable(path: Path, message: str, fix: str) -> InvalidInput:
    return InvalidInput(f"cannot read inventory file {path}", problems=[Problem("", message, fix)])


def _refuse_kind(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    raise _unreadable(path, f"{path} is {kind}, not a regular file", "pass -i with the path of the inventory YAML file")


def _os_error(path: Path, exc: OSError) -> InvalidInput:
    if exc.errno == errno.ENOENT:
        dangling = path.is_symlink()
        return InvalidInput(
            f"inventory file {path} not found",
            problems=[
                Problem(
                    "",
                    f"{path} is a symlink to a missing file" if dangling else f"no file at {path}",
                    "pass -i FILE, or write a sample with `rackctl init --example dvd-inference`",
                )
            ],
        )
    if exc.errno == errno.ELOOP:
        return _unreadable(
            path,
            f"{path}: too many levels of symbolic links (a symlink loop)",
            "point -i at the real file, or fix the symlinks",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _unreadable(path, f"{path}: permission denied", f"make it readable by this user (e.g. chmod u+r {path})")
    if exc.errno == errno.ENOTDIR:
        return _unreadable(path, f"{path}: a part of the path is not a directory", "check the path passed with -i")
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    return _unreadable(path, f"{path}: {reason}", "check the file and the path passed with -i")


def read_inventory_text(path: Path) -> str:
    """The file's text: a regular, readable, UTF-8 file of at most :data:`MAX_BYTES`; else InvalidInput."""
    path = Path(path)
    try:
        _refuse_kind(path, os.stat(path).st_mode)  # before opening: a FIFO would block open()
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        info = os.fstat(fd)
        _refuse_kind(path, info.st_mode)  # swapped between stat and open
        if info.st_size > MAX_BYTES:
            raise _unreadable(
                path,
                f"{path} is {info.st_size} bytes; an inventory is at most {MAX_BYTES}",
                "check that -i names the inventory",
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _os_error(path, exc) from None
    finally:
        os.close(fd)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InvalidInput(
            f"inventory file {path} is not UTF-8",
            problems=[
                Problem(
                    "",
                    f"byte {exc.start} (0x{raw[exc.start]:02x}) is not valid UTF-8",
                    f"save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 {path})",
                    line,
                )
            ],
        ) from None


def line_map(text: str) -> dict[str, int]:
    """YAML path -> 1-based line, for pointing at problems (built only when there are some)."""
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=_BaseLoader)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node, path: str) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = f"{path}.{key.value}" if path else str(key.value)
                lines[child] = key.start_mark.line + 1
                walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, f"{path}[{index}]")

    if root is not None:
        walk(root, "")
    return lines


def format_loc(loc: tuple[Any, ...], prefix: str = "") -> str:
    """('nodes', 3, 'bmc', 'address') -> 'nodes[3].bmc.address' (after ``prefix``, when given)."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """Strip Optional/Annotated/list; report whether a dict key comes next in the path."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            annotation = models[0] if models else args[0]
        elif origin is list:
            annotation = typing.get_args(annotation)[0]
        elif origin is dict:
            return typing.get_args(annotation)[1], True
        else:
            return annotation, False


def model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the last element of ``loc``."""
    cls: Any = Inventory
    skip_key = False
    for part in loc[:-1]:
        if skip_key:
            skip_key = False
            continue
        if isinstance(part, int):
            continue
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or part not in cls.model_fields:
            return None
        cls, skip_key = _unwrap(cls.model_fields[part].annotation)
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def _shown(value: Any, loc: tuple[Any, ...]) -> str:
    if any(isinstance(p, str) and any(w in p.lower() for w in SECRET_WORDS) for p in loc):
        return "<redacted>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: The fix for each pydantic error type the inventory models can produce ({ctx keys} are filled in).
#: ``extra_forbidden`` and ``missing`` get a fix built from the model; ``value_error`` from the validator.
PYDANTIC_FIXES: dict[str, str] = {
    "string_type": 'write a text value (quote it if YAML reads it as a number, a date or yes/no: key: "...")',
    "string_pattern_mismatch": "use a value matching {pattern}",
    "string_too_short": "use at least {min_length} character(s)",
    "string_too_long": "use at most {max_length} characters",
    "model_type": "write a mapping here (key: value lines, indented under this key)",
    "model_attributes_type": "write a mapping here (key: value lines, indented under this key)",
    "dict_type": "write a mapping here (key: value lines, indented under this key)",
    "list_type": "write a list here (lines starting with '- ', or [a, b])",
    "too_short": "give at least {min_length} item(s)",
    "too_long": "give at most {max_length} item(s)",
    "int_type": "write a whole number, without quotes",
    "int_parsing": "write a whole number, e.g. 100",
    "int_parsing_size": "write a smaller whole number",
    "int_from_float": "write a whole number, without a fractional part",
    "float_type": "write a number, e.g. 1.5",
    "float_parsing": "write a number, e.g. 1.5",
    "finite_number": "write a finite number (not .inf or .nan)",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "greater_than": "use a value greater than {gt}",
    "greater_than_equal": "use a value of at least {ge}",
    "less_than": "use a value less than {lt}",
    "less_than_equal": "use a value of at most {le}",
    "multiple_of": "use a multiple of {multiple_of}",
    "literal_error": "use one of {expected}",
    "enum": "use one of {expected}",
    "ip_v4_address": "write an IPv4 address, e.g. 10.10.0.11",
    "ip_v4_network": "write an IPv4 network with its prefix length, e.g. 10.10.0.0/24",
    "ip_v4_interface": "write an IPv4 address with its prefix length, e.g. 10.10.0.11/24",
    "path_type": "write a file path as text, e.g. /etc/rackctl/ca.pem",
    "none_required": "remove the value",
    "union_tag_invalid": "use one of {expected_tags}",
    "union_tag_not_found": "add the key {discriminator}",
    "url_parsing": "write a URL, e.g. https://host/path",
    "url_scheme": "use a URL with one of the schemes {expected_schemes}",
    "dict_attributes_type": "write a mapping here (key: value lines)",
    "frozen_set_type": "write a list here",
    "set_type": "write a list here",
    "tuple_type": "write a list here",
    "value_error": "write a value of the form the message describes",
    "assertion_error": "write a value of the form the message describes",
}
GENERIC_FIX = "correct the value at this path (see `rackctl init --example dvd-inference` for a valid inventory)"


def fix_for(kind: str, ctx: dict[str, Any] | None) -> str:
    """The fix for one pydantic error type, with its context filled in."""
    template = PYDANTIC_FIXES.get(kind, GENERIC_FIX)
    try:
        return template.format(**{k: v for k, v in (ctx or {}).items()})
    except (KeyError, IndexError, ValueError):
        return template.split("{", 1)[0].rstrip() or GENERIC_FIX


def problem_from_pydantic(error: ErrorDetails) -> Problem:
    """One pydantic error -> a Problem with path, value and fix (every error type has a fix)."""
    loc = tuple(error["loc"])
    path = format_loc(loc)
    kind = error["type"]
    field_name = str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        if any(w in field_name.lower() for w in SECRET_WORDS):
            return Problem(
                path,
                f"unknown key '{field_name}': passwords never go in the inventory",
                "reference a credential: set password_env (an environment variable) or password_file "
                "(a file with mode 0600) under `credentials:`",
            )
        model = model_at(loc)
        options = model.model_fields.keys() if model else []
        return Problem(path, f"unknown key '{field_name}'", did_you_mean(field_name, options) or "remove the key")
    if kind == "missing":
        model = model_at(loc)
        info = model.model_fields.get(field_name) if model else None
        hint = info.description if info and info.description else ""
        return Problem(path, f"required key '{field_name}' is missing", f"add it{': ' + hint if hint else ''}")
    message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    shown = _shown(error.get("input"), loc)
    if kind in ("value_error", "assertion_error") and "; " in message:
        message, fix = message.split("; ", 1)  # our validators write "what is wrong; how to fix it"
    else:
        fix = fix_for(kind, error.get("ctx"))
    return Problem(path, f"{message} (got {shown})", fix)


def validate_data(data: Any, source: Path | None = None) -> LoadResult:
    """Check parsed YAML: models first, then the cross-field rules. Raises InvalidInput with all problems."""

    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise InvalidInput(
            "the inventory must be a YAML mapping",
            problems=[
                Problem(
                    "",
                    f"the document is {kind}, not a mapping",
                    "start from `rackctl init --example dvd-inference`",
                )
            ],
        )
    try:
        inventory = Inventory.model_validate(data)
    except ValidationError as exc:
        problems = [problem_from_pydantic(e) for e in exc.errors(include_url=False)]
        problems += _rules_on_what_parsed(data, exc, source)
        raise InvalidInput(f"{len(problems)} problem(s) in the inventory", problems=problems) from None
    inventory.source = source.resolve() if source else None
    errors, warnings = run_rules(inventory)
    if errors:
        raise InvalidInput(f"{len(errors)} problem(s) in the inventory", problems=errors)
    return LoadResult(inventory, warnings)


def _rules_on_what_parsed(data: dict[str, Any], exc: ValidationError, source: Path | None) -> list[Problem]:
    """The rules' errors on the parts of the file that parsed, at their places in the file (see partial.py)."""
    part = parsed_part(data, exc)
    if part is None:
        return []
    part.inventory.source = source.resolve() if source else None
    errors, _ = run_rules(part.inventory)
    return [
        Problem(original_path(part, p.path), p.message, p.fix, p.line)
        for p in errors
        if not echoes_removal(part, p.path, p.message)
    ]


def _with_lines(exc: InvalidInput, text: str) -> InvalidInput:
    lines = line_map(text)

    def locate(path: str) -> int | None:
        while path:
            if path in lines:
                return lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return None

    exc.problems = [
        p if p.line is not None else Problem(p.path, p.message, p.fix, locate(p.path)) for p in exc.problems
    ]
    return exc


def check_inventory(path: Path) -> LoadResult:
    """Load and validate an inventory file, returning warnings too."""
    path = Path(path)
    text = read_inventory_text(path)
    data = load_yaml(text, str(path))
    try:
        return validate_data(data, path)
    except InvalidInput as exc:
        raise _with_lines(exc, text) from None


def load_inventory(path: Path) -> Inventory:
    """Load a valid inventory or raise :class:`InvalidInput` listing every problem."""
    return check_inventory(Path(path)).inventory
