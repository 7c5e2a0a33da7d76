"""One redaction: the BMC password that resolving the credentials registers is masked wherever text leaves
rackctl (journal, progress, errors shown by the CLI, log records); key names and paths are never masked."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import flags
from bootstrap.cli.common import handle_errors
from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory import load_inventory
from bootstrap.inventory.secrets import resolve_bmc_credentials
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.runner import RedactingProgress
from redfish_tools.secrets import REDACTED, forget_secret, redact

PASSWORD = "Zq7-lab-bmc-password"
VERBATIM = (
    "credentials.idrac.password_file: password_file: /etc/x missing; "
    "environment variable RACKCTL_BMC_PASSWORD is not set; fix: export RACKCTL_BMC_PASSWORD=<the BMC password>"
)


@pytest.fixture
def password(data: dict, tmp_path: Path) -> Iterator[str]:
    """The sample inventory's password resolved from a 0600 file (and so registered); forgotten after."""
    secrets = tmp_path / "bmc.yml"
    secrets.write_text(f"idrac: {PASSWORD}\n")
    os.chmod(secrets, 0o600)
    data["credentials"]["idrac"] = {"username": "root", "password_file": "bmc.yml"}
    (tmp_path / "cluster.yml").write_text(yaml.safe_dump(data))
    inventory = load_inventory(tmp_path / "cluster.yml")
    assert redact(PASSWORD) == PASSWORD  # not registered before it is resolved
    creds = resolve_bmc_credentials(inventory, inventory.nodes[0])
    assert creds.password.get_secret_value() == PASSWORD
    yield PASSWORD
    forget_secret(PASSWORD)


def test_the_journal_masks_the_registered_password(password: str, tmp_path: Path) -> None:
    with Journal(tmp_path / "state") as journal:
        journal.register_nodes(["n1"])
        run = journal.begin_run(f"up --note {password}")
        journal.transition("n1", NodeState.FAILED, f"login refused for root/{password}", run_id=run)
        journal.record_step(
            run, "n1", "discover", "read", status="failed", destructive=False, detail={"error": f"echo {password}"}
        )
        journal.finish_run(run, "failed", f"{VERBATIM}; BMC said {password}")
        stored = [journal.history("n1")[-1].cause, journal.run(run).message, journal.run(run).command]
        stored.append(json.dumps(journal.steps(node="n1")[-1].detail))
    assert not any(password in text for text in stored)
    assert all(REDACTED in text for text in stored)
    assert stored[1] == f"{VERBATIM}; BMC said {REDACTED}"
    raw = b"".join(p.read_bytes() for p in (tmp_path / "state").glob("journal.sqlite3*"))
    assert password.encode() not in raw


class Lines:
    """A progress reporter keeping every line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def stage_started(self, stage: str, nodes: object) -> None:
        self.lines.append(f"start {stage}")

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None:
        self.lines.append(message)

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None:
        self.lines.append(message)

    def log(self, message: str) -> None:
        self.lines.append(message)


def test_progress_lines_mask_it(password: str) -> None:
    inner = Lines()
    progress = RedactingProgress(inner)
    progress.node_done("discover", "n1", False, f"401 for {password}")
    progress.stage_finished("discover", False, VERBATIM)
    progress.log(f"retrying with {password}")
    assert inner.lines == [f"401 for {REDACTED}", VERBATIM, f"retrying with {REDACTED}"]


@click.command()
@flags.json
@handle_errors()
def failing(as_json: bool) -> None:
    """A command whose error carries the password (as a library's message might)."""
    raise InvalidInput(
        f"the BMC rejected {PASSWORD}",
        problems=[Problem("credentials.idrac.password_file", f"password_file: /etc/x missing ({PASSWORD})", "fix")],
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_errors_shown_by_the_cli_mask_it(password: str, as_json: bool) -> None:
    result = CliRunner().invoke(failing, ["--json"] if as_json else [])
    assert result.exit_code == 2
    assert password not in result.output and REDACTED in result.output
    assert "password_file: /etc/x missing" in result.output


def test_log_records_mask_it_whatever_the_logger(password: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        for name in ("bootstrap.oob", "redfish_tools.fleet", "redfish.rest.v1", "somewhere.else"):
            logging.getLogger(name).info("login as root with %s; %s", password, VERBATIM)
        try:
            raise ValueError(f"bad password {password}")
        except ValueError:
            logging.getLogger("bootstrap").exception("failed")
    assert password not in caplog.text
    assert caplog.text.count(VERBATIM) == 4
    assert caplog.records[0].getMessage() == f"login as root with {REDACTED}; {VERBATIM}"


def test_unregistered_text_is_kept_and_shapes_are_masked() -> None:
    assert redact(VERBATIM) == VERBATIM
    assert redact("password=calvin token: abc") == "password=calvin token: abc"  # names are not values
    assert redact("GET https://root:calvin@10.0.0.5/redfish/v1") == f"GET https://root:{REDACTED}@10.0.0.5/redfish/v1"
    assert redact("X-Auth-Token: 0123abcd") == f"X-Auth-Token: {REDACTED}"
    assert redact("Authorization: Basic cm9vdDpjYWx2aW4=") == f"Authorization: Basic {REDACTED}"
    assert redact('{"UserName": "root", "Password": "calvin"}') == f'{{"UserName": "root", "Password": "{REDACTED}"}}'
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----"
    assert "b3BlbnNzaA" not in redact(f"key: {pem} end") and redact(f"key: {pem} end").endswith(" end")
