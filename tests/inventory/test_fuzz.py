"""Hypothesis fuzzing of the loader: arbitrary YAML, mutated valid inventories, anchors/aliases (alias
bombs among them) and deep nesting.

Whatever the input, loading either succeeds or raises InvalidInput with problems, within a time bound per
example; the CLI exits 0 or 2, never with a traceback.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory import validate_data
from bootstrap.inventory.loader import MAX_DEPTH, load_yaml
from tests.inventory.conftest import _SAMPLE_DATA

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.sampled_from(["10.10.0.300", "10.20.0.0/24", "R660", "worker", "head", "b0:7b:25:00:00:01", ""]),
)
yaml_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


ALL_PATHS = [p for p in _paths(_SAMPLE_DATA) if p]


def _check(data: Any) -> None:
    try:
        validate_data(data)
    except InvalidInput as exc:
        assert exc.problems, "InvalidInput without problems"
        for problem in exc.problems:
            assert isinstance(problem.path, str) and problem.message


@settings(max_examples=300, deadline=None)
@given(yaml_values)
def test_arbitrary_documents_never_crash(doc):
    _check(doc)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(text):
    try:
        data = load_yaml(text)
    except InvalidInput:
        return
    _check(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), yaml_values | st.just("__delete__")), min_size=1, max_size=4))
def test_mutated_valid_inventories_never_crash(mutations):
    data = copy.deepcopy(_SAMPLE_DATA)
    for path, value in mutations:
        parent = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            if value == "__delete__":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    _check(data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(yaml_values)
def test_cli_exit_code_is_0_or_2_and_json_parses(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fuzz") / "inv.yml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, ["validate", "-i", str(path), "--json"])
    assert result.exit_code in (0, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert json.loads(result.output)["ok"] is (result.exit_code == 0)


#: seconds one hostile example may take to be refused (an alias bomb took minutes before)
TIME_BOUND = 2.0
SAMPLE_TEXT = yaml.safe_dump(_SAMPLE_DATA, sort_keys=False)


def _only_invalid_input_in_time(text: str) -> None:
    start = time.monotonic()
    try:
        data = load_yaml(text)
    except InvalidInput as exc:
        assert exc.problems and all(p.fix for p in exc.problems), exc.problems
    else:
        _check(data)
    assert time.monotonic() - start < TIME_BOUND, "took too long"


@st.composite
def alias_documents(draw: st.DrawFn) -> str:
    """Anchors and aliases: nested fan-out (alias bombs), merge keys, undefined aliases."""
    levels = draw(st.integers(1, 12))
    width = draw(st.integers(1, 12))
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels):
        refs = draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=width))
        lines.append(f"a{i}: &a{i} [" + ", ".join(f"*a{r}" for r in refs) + "]")
    extra = draw(st.sampled_from(["", "m: {<<: *a0}", "u: *nowhere", "k: &k {x: 1}\nl: *k", "*a0 : 1"]))
    return "\n".join([*lines, extra]) + "\n"


@st.composite
def anchored_inventories(draw: st.DrawFn) -> str:
    """The valid sample with an anchor on one value and an alias to it on another."""
    lines = SAMPLE_TEXT.splitlines()
    slots = [i for i, line in enumerate(lines) if ": " in line and not line.rstrip().endswith(":")]
    first, second = draw(st.lists(st.sampled_from(slots), min_size=2, max_size=2, unique=True))
    key, value = lines[first].split(": ", 1)
    lines[first] = f"{key}: &v {value}"
    key2 = lines[second].split(": ", 1)[0]
    lines[second] = f"{key2}: *v"
    return "\n".join(lines) + "\n"


@st.composite
def nested_documents(draw: st.DrawFn) -> str:
    """Flow or block nesting from shallow to far past MAX_DEPTH, closed or not."""
    depth = draw(st.integers(1, 3000))
    style = draw(st.sampled_from(["flow-list", "flow-map", "block-list", "block-map"]))
    closed = draw(st.booleans())
    if style == "flow-list":
        return "[" * depth + ("]" * depth if closed else "")
    if style == "flow-map":
        return "{a: " * depth + ("1" + "}" * depth if closed else "")
    depth = min(depth, 400)  # block styles grow quadratically with indentation
    if style == "block-list":
        return "".join(" " * (2 * i) + "-\n" for i in range(depth)) + " " * (2 * depth) + "- x\n"
    return "".join(" " * (2 * i) + f"k{i}:\n" for i in range(depth)) + " " * (2 * depth) + "v: 1\n"


@settings(max_examples=150, deadline=None)
@given(alias_documents())
def test_alias_documents_only_invalid_input_in_time(text):
    _only_invalid_input_in_time(text)


@settings(max_examples=100, deadline=None)
@given(anchored_inventories())
def test_anchors_in_a_valid_inventory_only_invalid_input_in_time(text):
    _only_invalid_input_in_time(text)


def test_alias_strategy_reaches_a_bomb():
    """The strategy above cannot pass vacuously: its widest documents are refused as alias bombs."""
    text = (
        "a0: &a0 ["
        + ", ".join(["x"] * 12)
        + "]\n"
        + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 12) + "]\n" for i in range(1, 12))
    )
    with pytest.raises(InvalidInput, match="expands aliases too far"):
        load_yaml(text)


@settings(max_examples=150, deadline=None)
@given(nested_documents())
def test_deep_nesting_only_invalid_input_in_time(text):
    _only_invalid_input_in_time(text)


def test_nesting_strategy_reaches_past_the_limit():
    """The strategies above cannot pass vacuously: the deepest documents are refused."""
    with pytest.raises(InvalidInput, match="nested too deeply"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
