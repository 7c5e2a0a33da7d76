"""Hypothesis fuzzing of the loader: arbitrary YAML and mutated valid inventories.

Whatever the input, loading either succeeds or raises InvalidInput with problems; the CLI exits 0 or 2,
never with a traceback.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory import validate_data
from bootstrap.inventory.loader import load_yaml
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
