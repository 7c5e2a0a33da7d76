"""Read an inventory file: YAML with duplicate-key detection, then the models, then the rules.

Every failure becomes a :class:`~bootstrap.errors.Problem` with the YAML path, the line, the value
and the fix; all of them are collected and raised together as one :class:`InvalidInput`.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SECRET_WORDS = ("password", "passwd", "secret", "token")


class _UniqueKeyLoader(_BaseLoader):  # type: ignore[misc,valid-type]
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


def load_yaml(text: str, source: str = "<inventory>") -> Any:
    """Parse YAML text; syntax errors and duplicate keys raise :class:`InvalidInput`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{context}, {problem}" if context else str(problem)
        raise InvalidInput(
            f"{source} is not valid YAML",
            problems=[Problem("", message, "fix the YAML syntax at that line", line)],
        ) from None


def read_inventory_data(path: Path) -> Any:
    """Read and parse the inventory file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(
            f"inventory file {path} not found",
            problems=[
                Problem(
                    "",
                    f"no file at {path}",
                    "pass -i FILE, or write a sample with `rackctl init --example dvd-inference`",
                )
            ],
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read inventory file {path}: {exc.__class__.__name__}") from None
    return load_yaml(text, str(path))


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


def format_loc(loc: tuple[Any, ...]) -> str:
    """('nodes', 3, 'bmc', 'address') -> 'nodes[3].bmc.address'."""
    out = ""
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


def did_you_mean(word: str, options: typing.Iterable[str]) -> str:
    """'did you mean X?' or a list of the valid choices."""
    options = sorted(options)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "valid keys: " + ", ".join(options) if options else ""


def _shown(value: Any, loc: tuple[Any, ...]) -> str:
    if any(isinstance(p, str) and any(w in p.lower() for w in SECRET_WORDS) for p in loc):
        return "<redacted>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def problem_from_pydantic(error: dict[str, Any]) -> Problem:
    """One pydantic error -> a Problem with path, value and fix."""
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
        return Problem(path, f"unknown key '{field_name}'", did_you_mean(field_name, options))
    if kind == "missing":
        model = model_at(loc)
        info = model.model_fields.get(field_name) if model else None
        hint = info.description if info and info.description else ""
        return Problem(path, f"required key '{field_name}' is missing", f"add it{': ' + hint if hint else ''}")
    message = error["msg"].removeprefix("Value error, ")
    shown = _shown(error.get("input"), loc)
    fix = ""
    if kind in ("literal_error", "enum"):
        expected = (error.get("ctx") or {}).get("expected", "")
        fix = f"use one of {expected}"
    return Problem(path, f"{message} (got {shown})", fix)


def validate_data(data: Any, source: Path | None = None) -> LoadResult:
    """Check parsed YAML: models first, then the cross-field rules. Raises InvalidInput with all problems."""
    from bootstrap.inventory.rules import run_rules  # noqa: PLC0415 - rules import this module

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
        raise InvalidInput(f"{len(problems)} problem(s) in the inventory", problems=problems) from None
    inventory.source = source.resolve() if source else None
    errors, warnings = run_rules(inventory)
    if errors:
        raise InvalidInput(f"{len(errors)} problem(s) in the inventory", problems=errors)
    return LoadResult(inventory, warnings)


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
    data = read_inventory_data(path)
    try:
        return validate_data(data, path)
    except InvalidInput as exc:
        raise _with_lines(exc, path.read_text(encoding="utf-8")) from None


def load_inventory(path: Path) -> Inventory:
    """Load a valid inventory or raise :class:`InvalidInput` listing every problem."""
    return check_inventory(Path(path)).inventory
