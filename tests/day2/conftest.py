"""Day-2 fixtures: a rack of emulated iDRACs (the sample inventory's five nodes) and inventories on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from bootstrap.cli import cli
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from tests.cli.conftest import inventory_on_rack
from tests.redfish.rf_lab import NODES, api, make_spec


class Rack:
    """The running emulated rack, its specs and endpoints, and the password variables of its inventory."""

    def __init__(self, rack: Any, specs: dict[str, Any], endpoints: dict[str, Any], tmp: Path) -> None:
        self.rack, self.specs, self.endpoints, self.tmp = rack, specs, endpoints, tmp
        self.full, self.env = inventory_on_rack(tmp, specs, endpoints)

    def inventory(self, name: str, *, without: tuple[str, ...] = (), edit: Any = None) -> Path:
        """The full inventory without the nodes in ``without``, edited by ``edit(data)``, written to ``name``."""
        yaml = YAML()
        data = yaml.load(self.full.read_text())
        data["nodes"] = [n for n in data["nodes"] if n["hostname"] not in without]
        data.pop("models", None)  # served models are not day-2's concern (and name GPUs a removal takes away)
        if edit is not None:
            edit(data)
        out = StringIO()
        yaml.dump(data, out)
        path = self.tmp / name
        path.write_text(out.getvalue())
        return path

    def log_sizes(self) -> dict[str, int]:
        """How many requests each emulated iDRAC has received so far."""
        return {name: len(self.rack.request_log(name)) for name in self.specs}

    def requests_since(self, name: str, start: int) -> list[dict[str, Any]]:
        return self.rack.request_log(name)[start:]

    def invoke(self, *args: str) -> tuple[int, dict[str, Any]]:
        """``rackctl ARGS --json`` in this process; (exit code, the JSON document)."""
        result = CliRunner().invoke(cli, [*args, "--json"], env=self.env)
        try:
            return result.exit_code, json.loads(result.stdout)
        except ValueError:
            raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rack]:
    specs = [make_spec(*n, index=i) for i, n in enumerate(NODES)]
    emulated = api.EmulatedRack(specs, tmp_path_factory.mktemp("rack"), processes=1)
    endpoints = emulated.start()
    try:
        yield Rack(emulated, {s.name: s for s in specs}, {e.name: e for e in endpoints}, tmp_path_factory.mktemp("inv"))
    finally:
        emulated.stop()


def mark_joined(state: Path, nodes: list[str], why: str = "joined by the kubernetes stage (stand-in)") -> None:
    """STAND-IN for the kubernetes stage's record of a join: the journal moves ``nodes`` (configured or
    provisioned) to ``joined``, saying ``why`` the test does it."""
    with Journal(state) as journal:
        for name in nodes:
            path = {
                NodeState.CONFIGURED: (NodeState.PROVISIONING, NodeState.PROVISIONED, NodeState.JOINED),
                NodeState.PROVISIONED: (NodeState.JOINED,),
            }[journal.state(name)]
            for to in path:
                journal.transition(name, to, f"test setup: {why}")
