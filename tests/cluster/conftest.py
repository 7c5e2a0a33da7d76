"""Inventories for the cluster render tests (the shipped example, edited per test); the real kube-apiserver."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import apiserver
from tests.cluster.apiserver import ApiServer

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"


@pytest.fixture
def write_inventory(tmp_path: Path) -> Callable[..., Path]:
    """Write the example inventory with ``edit(data)`` applied; return its path."""

    def write(edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
        data = yaml.safe_load(EXAMPLE.read_text())
        if edit is not None:
            edit(data)
        path = tmp_path / "cluster.yml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def kube_apiserver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real kube-apiserver 1.20.2 + etcd on loopback for the whole session (tests/cluster/apiserver.py).

    Skips when the binary was not built (scripts/build-kube-apiserver.sh); with RACKCTL_REQUIRE_APISERVER=1
    (scripts/test.sh, CI) that is a failure instead. Logs go to stderr when a test of the session failed.
    """
    binary = apiserver.find_binary()
    if binary is None or not binary.is_file():
        reason = (
            f"no kube-apiserver {apiserver.VERSION} binary ({binary or 'not in the cache'}): "
            f"run {apiserver.BUILD_SCRIPT} (builds it from Debian's source, ~7 min cold)"
        )
        if os.environ.get("RACKCTL_REQUIRE_APISERVER"):
            pytest.fail(reason)
        pytest.skip(reason)
    server = apiserver.start(binary, tmp_path_factory.mktemp("kube-apiserver"))
    try:
        yield server
    finally:
        server.stop()
        if request.session.testsfailed:
            sys.stderr.write(f"\n--- kube-apiserver/etcd logs ({server.workdir})\n{server.logs()[-8000:]}\n")
