"""Preflight's environment checks: this machine's problems are the operator's, never a node's.

The real preflight stage, the real runner and SQLite journal, through the CLI. The BMC addresses are free
loopback ports where nothing listens: the environment checks come before any BMC is contacted, and a BMC
that cannot be reached is the node failure these tests contrast with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_FAILED, EXIT_INVALID
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from tests.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
NODES = ("head-01", "gpu-01", "gpu-02")
ENV_VAR = "RACKCTL_TEST_PREFLIGHT_BMC_PASSWORD"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of ``inventory/lab.yml`` (BMCs on dead ports) in a tree without ``.lab/``; the tree."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    (tmp_path / "inventory").mkdir()
    text = (REPO / "inventory" / "lab.yml").read_text()
    for port, free in zip(("8441", "8442", "8443"), free_ports(3), strict=True):
        text = text.replace(f'"127.0.0.1:{port}"', f'"127.0.0.1:{free}"')
    (tmp_path / "inventory" / "lab.yml").write_text(text)
    return tmp_path


def edit(tree: Path, change: Any) -> Path:
    """Write the inventory after ``change(data)``; its path."""
    path = tree / "inventory" / "lab.yml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def up_preflight(tree: Path) -> tuple[int, dict]:
    args = ["up", "-i", str(tree / "inventory" / "lab.yml"), "--state-dir", str(tree / "state")]
    result = CliRunner().invoke(cli, [*args, "--stages", "preflight", "--yes", "--json"])
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None


def states(tree: Path) -> dict[str, str]:
    with Journal(tree / "state", readonly=True) as journal:
        return {n: journal.state(n).value for n in NODES}


def use_env(data: dict) -> None:
    """Every credential from ``$ENV_VAR``; BMC TLS not verified (no CA bundle needed)."""
    data["credentials"] = {n: {"username": "root", "password_env": ENV_VAR} for n in data["credentials"]}
    data["bmc"]["defaults"] = {"insecure": True}


def problems(out: dict) -> dict[str, str]:
    """path -> "message; fix" of each reported problem."""
    return {p["path"]: f"{p['message']}; {p.get('fix', '')}" for p in out["errors"]}


def test_missing_password_file_and_ca_bundle_are_reported_with_fixes(site: Path) -> None:
    code, out = up_preflight(site)
    assert code == EXIT_INVALID, out
    found = problems(out)
    for name in ("lab-head-01", "lab-gpu-01", "lab-gpu-02"):
        text = found[f"credentials.{name}.password_file"]
        assert "../.lab/secrets/bmc.yml" in text and "does not exist" in text and "mode 0600" in text
    ca = [t for p, t in found.items() if p.endswith(".bmc.ca_file")]
    assert len(ca) == 1, "one bundle, reported once"
    assert "../.lab/pki/ca.pem does not exist" in ca[0] and "rackctl lab up" in ca[0]
    assert states(site) == dict.fromkeys(NODES, "registered")
    with Journal(site / "state", readonly=True) as journal:
        run = journal.runs()[0]
        assert journal.steps() == []  # no stage step was recorded for any node
    assert run.status == "failed" and "credentials.lab-gpu-01.password_file" in run.message


def test_password_file_readable_by_others(site: Path) -> None:
    secrets = site / ".lab" / "secrets" / "bmc.yml"
    secrets.parent.mkdir(parents=True)
    secrets.write_text("".join(f"lab-{n}: pw-{n}-123\n" for n in NODES))
    os.chmod(secrets, 0o644)
    edit(site, lambda d: d["bmc"].update(defaults={"insecure": True}))
    code, out = up_preflight(site)
    assert code == EXIT_INVALID, out
    text = problems(out)["credentials.lab-head-01.password_file"]
    assert "has mode 0644" in text and f"chmod 600 {secrets}" in text
    assert "pw-head-01-123" not in json.dumps(out)
    assert states(site) == dict.fromkeys(NODES, "registered")


def test_missing_env_var_is_named_with_its_fix_and_no_node_fails(site: Path) -> None:
    edit(site, use_env)
    code, out = up_preflight(site)
    assert code == EXIT_INVALID, out
    text = problems(out)["credentials.lab-gpu-02.password_env"]
    assert f"environment variable {ENV_VAR} is not set" in text
    assert f"export {ENV_VAR}=<the BMC password>" in text  # kept verbatim, not masked
    assert states(site) == dict.fromkeys(NODES, "registered")
    with Journal(site / "state", readonly=True) as journal:
        assert f"export {ENV_VAR}=<the BMC password>" in journal.runs()[0].message


def test_an_unparsable_ca_bundle(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "pw-0123456")
    edit(site, lambda d: (use_env(d), d["bmc"].update(defaults={"ca_file": "../.lab/pki/ca.pem"})))
    bundle = site / ".lab" / "pki" / "ca.pem"
    bundle.parent.mkdir(parents=True)
    bundle.write_text("not a certificate\n")
    code, out = up_preflight(site)
    assert code == EXIT_INVALID, out
    assert "does not parse" in next(t for p, t in problems(out).items() if p.endswith(".bmc.ca_file"))
    assert states(site) == dict.fromkeys(NODES, "registered")


def test_a_failed_node_stays_failed_and_a_dead_bmc_fails_its_node(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edit(site, use_env)
    with Journal(site / "state") as journal:
        journal.register_nodes(list(NODES))
        journal.transition("gpu-01", NodeState.FAILED, "an earlier run failed it")
    code, out = up_preflight(site)
    assert code == EXIT_INVALID, out
    assert states(site) == {"head-01": "registered", "gpu-01": "failed", "gpu-02": "registered"}
    # with the environment ready, preflight reaches the node checks: a BMC that does not answer is the node's
    monkeypatch.setenv(ENV_VAR, "pw-0123456")
    code, out = up_preflight(site)
    assert code == EXIT_FAILED, out
    assert "BMC no answer: cannot reach the BMC" in out["stages"][0]["nodes"]["head-01"]["message"]
    assert set(states(site).values()) == {"failed"}
