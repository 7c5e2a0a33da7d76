"""Helpers for CLI tests: run the real ``rackctl`` in a subprocess, and a BMC that never answers."""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from tests import timing
from tests.inventory.conftest import _SAMPLE_DATA

ROOT = Path(__file__).resolve().parents[2]


def rackctl_env(**extra: str) -> dict[str, str]:
    """The environment a subprocess ``rackctl`` runs in: this checkout (and its lab package) first on the path."""
    path = os.pathsep.join((str(ROOT), str(ROOT / "lab")))
    return {**os.environ, "PYTHONPATH": path, "RACKCTL_BMC_PASSWORD": "pw-not-shown", **extra}


def rackctl(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bootstrap ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "bootstrap", *args],
        cwd=ROOT,
        env=rackctl_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class SilentBmc:
    """A TCP port that accepts connections and never answers (a hung iDRAC); it knows when a client waits."""

    def __init__(self, server: socket.socket) -> None:
        self.server = server
        self.port: int = server.getsockname()[1]
        self.clients: list[socket.socket] = []

    def wait_for_request(self, timeout: float = timing.SLOW_S) -> bytes:
        """Block until a client connected and sent its first bytes (a TLS hello): it now waits for an answer."""
        self.server.settimeout(timing.seconds(timeout))
        client, _ = self.server.accept()
        self.clients.append(client)  # kept open, never answered, until the fixture ends
        client.settimeout(timing.seconds(timeout))
        return client.recv(1)

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture
def silent_bmc() -> Iterator[SilentBmc]:
    """A :class:`SilentBmc` on a free loopback port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        bmc = SilentBmc(server)
        try:
            yield bmc
        finally:
            bmc.close()


def loopback_inventory(tmp_path: Path, port: int, *, insecure: bool = True) -> Path:
    """The sample inventory as a lab cluster whose first node's BMC is 127.0.0.1:``port``."""
    data: dict[str, Any] = copy.deepcopy(_SAMPLE_DATA)
    data["cluster"]["lab"] = True
    for index, node in enumerate(data["nodes"]):
        node["bmc"] = {"address": f"127.0.0.1:{port if index == 0 else 1 + index}"}
    if insecure:
        data["bmc"]["defaults"]["insecure"] = True
    else:
        data["bmc"]["defaults"]["fingerprint"] = "AB" * 32
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def inventory_on_rack(tmp_path: Path, specs: dict, endpoints: dict) -> tuple[Path, dict[str, str]]:
    """The sample inventory pointed at an emulated rack (pinned fingerprints) and its password variables."""
    yaml = YAML()
    data = yaml.load((ROOT / "inventory" / "examples" / "dvd-inference.yml").read_text())
    data["cluster"]["lab"] = True
    data["credentials"] = {}
    env: dict[str, str] = {}
    for node in data["nodes"]:
        name = node["hostname"]
        var = "RF_PW_" + name.upper().replace("-", "_")
        env[var] = specs[name].password
        data["credentials"][name] = {"username": "root", "password_env": var}
        node["bmc"]["address"] = endpoints[name].url
        node["bmc"]["fingerprint"] = endpoints[name].fingerprint
        node["bmc"]["credentials"] = name
    out = StringIO()
    yaml.dump(data, out)
    path = tmp_path / "cluster.yml"
    path.write_text(out.getvalue())
    return path, env
