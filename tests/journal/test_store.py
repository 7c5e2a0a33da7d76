"""The SQLite run journal: persistence, transitions, steps, facts, runs, secrets, concurrency."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from bootstrap.errors import EnvironmentMissing, InvalidInput
from bootstrap.journal.secrets import SecretRefused
from bootstrap.journal.states import InvalidTransition, NodeState
from bootstrap.journal.store import JOURNAL_FILE, SCHEMA_VERSION, Journal, JournalBusy
from redfish_tools.secrets import forget_secret, register_secret

S = NodeState


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    j = Journal(tmp_path)
    j.register_nodes(["n1", "n2"])
    yield j
    j.close()


def walk(j: Journal, node: str, *states: NodeState) -> None:
    for state in states:
        j.transition(node, state, f"test moves to {state.value}")


def test_state_and_history_persist_across_instances(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        run = j.begin_run("up")
        assert j.register_nodes(["a", "b"], run_id=run) == ["a", "b"]
        j.transition("a", S.DISCOVERED, "hardware read", run_id=run)
        j.record_facts("a", "discover", {"gpus": 8, "model": "XE9680"})
        with j.step(run, "a", "bios", "apply", destructive=True):
            pass
        j.finish_run(run, "completed", "done")
    with Journal(tmp_path) as j:
        assert j.state("a") is S.DISCOVERED
        assert j.state("b") is S.REGISTERED
        assert j.register_nodes(["a", "b", "c"]) == ["c"]
        hist = j.history("a")
        assert [(t.from_state, t.to_state, t.cause) for t in hist] == [
            (None, S.REGISTERED, "registered from the inventory"),
            (S.REGISTERED, S.DISCOVERED, "hardware read"),
        ]
        assert hist[1].run == run
        times = [datetime.fromisoformat(t.at) for t in hist]
        assert times == sorted(times) and times[0].tzinfo is not None
        assert j.latest_facts("a") == {"discover": {"gpus": 8, "model": "XE9680"}}
        assert j.step(None, "a", "bios", "apply", destructive=True).already_done
        assert j.run(run).status == "completed"
        assert j.run(run).finished is not None


def test_journal_is_one_wal_file_with_a_schema_version(tmp_path: Path, journal: Journal) -> None:
    assert (tmp_path / JOURNAL_FILE).is_file()
    conn = sqlite3.connect(tmp_path / JOURNAL_FILE)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    conn = sqlite3.connect(tmp_path / JOURNAL_FILE)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(EnvironmentMissing, match="upgrade rackctl"):
        Journal(tmp_path)


def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_FILE).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InvalidInput, match="not a readable rackctl journal"):
        Journal(tmp_path)


def test_invalid_transition_is_refused_and_not_recorded(journal: Journal) -> None:
    before = journal.history("n1")
    with pytest.raises(InvalidTransition, match=r"'n1': cannot move from registered to ready"):
        journal.transition("n1", S.READY, "skip ahead")
    assert journal.state("n1") is S.REGISTERED
    assert journal.history("n1") == before


def test_transition_needs_a_cause_and_a_known_node(journal: Journal) -> None:
    with pytest.raises(InvalidInput, match="needs a cause"):
        journal.transition("n1", S.DISCOVERED, "  ")
    with pytest.raises(InvalidInput, match="'ghost'"):
        journal.transition("ghost", S.DISCOVERED, "x")
    with pytest.raises(InvalidInput, match="'ghost' is not in the journal"):
        journal.state("ghost")


def test_failed_node_retries_only_from_where_it_failed(journal: Journal) -> None:
    walk(journal, "n1", S.DISCOVERED, S.CONFIGURED, S.PROVISIONING)
    journal.transition("n1", S.FAILED, "PXE timeout")
    assert journal.status("n1").left_from() is S.PROVISIONING
    with pytest.raises(InvalidTransition):
        journal.transition("n1", S.PROVISIONED, "pretend it worked")
    journal.transition("n1", S.PROVISIONING, "retry")
    assert journal.status("n1").left_from() is None


def test_maintenance_returns_to_the_state_it_left_even_via_failed(journal: Journal) -> None:
    walk(journal, "n1", S.DISCOVERED, S.FAILED, S.MAINTENANCE)
    with pytest.raises(InvalidTransition, match=r"only to the state it left \(failed\)"):
        journal.transition("n1", S.DISCOVERED, "skip the failure")
    journal.transition("n1", S.FAILED, "maintenance over")
    # the failure still remembers where it happened
    assert journal.status("n1").left_from() is S.DISCOVERED
    with pytest.raises(InvalidTransition):
        journal.transition("n1", S.CONFIGURED, "x")
    journal.transition("n1", S.DISCOVERED, "retry")


def test_reimage_needs_force_and_starts_a_new_epoch(journal: Journal) -> None:
    walk(journal, "n1", S.DISCOVERED, S.CONFIGURED, S.PROVISIONING)
    with journal.step(1, "n1", "provision", "write-image", destructive=True):
        pass
    walk(journal, "n1", S.PROVISIONED)
    assert journal.step(2, "n1", "provision", "write-image", destructive=True).already_done
    with pytest.raises(InvalidTransition, match="--force"):
        journal.transition("n1", S.PROVISIONING, "reimage")
    epoch = journal.status("n1").epoch
    journal.transition("n1", S.PROVISIONING, "reimage requested", force=True)
    assert journal.status("n1").epoch == epoch + 1
    step = journal.step(3, "n1", "provision", "write-image", destructive=True)
    assert not step.already_done, "a reimage must write the image again"
    assert step.previous is None
    assert journal.last_step("n1", "provision", "write-image", any_epoch=True) is not None


def test_retry_in_the_same_state_keeps_completed_steps(journal: Journal) -> None:
    walk(journal, "n1", S.DISCOVERED, S.CONFIGURED, S.PROVISIONING)
    with journal.step(1, "n1", "provision", "write-image", destructive=True):
        pass
    walk(journal, "n1", S.FAILED, S.PROVISIONING)
    assert journal.step(2, "n1", "provision", "write-image", destructive=True).already_done
    walk(journal, "n1", S.FAILED, S.CONFIGURED)  # going further back redoes the work
    assert not journal.step(3, "n1", "provision", "write-image", destructive=True).already_done


def test_step_records_started_completed_failed_interrupted(journal: Journal) -> None:
    with journal.step(1, "n1", "bios", "apply", destructive=True) as step:
        assert not step.already_done
        step.detail = {"job": "JID_123"}
    with pytest.raises(RuntimeError), journal.step(1, "n1", "bios", "reboot") as step:
        raise RuntimeError("BMC at https://root:calvin@10.0.0.5 said no")
    with pytest.raises(KeyboardInterrupt), journal.step(1, "n1", "bios", "wait"):
        raise KeyboardInterrupt
    rows = [(s.step, s.status) for s in journal.steps(node="n1")]
    assert rows == [
        ("apply", "started"),
        ("apply", "completed"),
        ("reboot", "started"),
        ("reboot", "failed"),
        ("wait", "started"),
        ("wait", "interrupted"),
    ]
    failed = journal.steps(node="n1")[3]
    assert "calvin" not in failed.detail["error"] and "RuntimeError" in failed.detail["error"]
    assert journal.steps(node="n1")[1].detail == {"job": "JID_123"}
    assert journal.steps(node="n1")[1].destructive
    assert not journal.step(2, "n1", "bios", "reboot").already_done
    wait = journal.step(2, "n1", "bios", "wait")
    assert wait.interrupted and not wait.already_done


def test_completed_step_is_skipped_unless_forced(journal: Journal) -> None:
    with journal.step(1, "n1", "provision", "wipe", destructive=True):
        pass
    again = journal.step(2, "n1", "provision", "wipe", destructive=True)
    with again:
        assert again.already_done
    # nothing was recorded for the skipped step
    assert len(journal.steps(node="n1")) == 2
    forced = journal.step(2, "n1", "provision", "wipe", destructive=True, force=True)
    assert not forced.already_done


@pytest.mark.parametrize(
    "facts",
    [
        {"bmc": {"username": "root", "password": "calvin"}},
        {"nodes": [{"authToken": "abc123"}]},
        {"X-Auth-Token": "abc123"},
        {"client_secret": "s3cr3t"},
        {"ssh": {"private_key": "AAAA"}},
        {"apiKey": "k"},
        {"note": SecretStr("calvin")},
        {"keys": ["-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----"]},
    ],
)
def test_secrets_are_refused_and_never_written(tmp_path: Path, journal: Journal, facts: dict) -> None:
    with pytest.raises(SecretRefused) as info:
        journal.record_facts("n1", "discover", facts)
    assert "calvin" not in str(info.value) and "abc123" not in str(info.value)
    with pytest.raises(SecretRefused):
        journal.record_step(1, "n1", "discover", "read", status="completed", destructive=False, detail=facts)
    assert journal.latest_facts("n1") == {}
    assert journal.steps(node="n1") == []
    journal.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob(f"{JOURNAL_FILE}*"))
    for needle in (b"calvin", b"abc123", b"s3cr3t", b"b3BlbnNzaA"):
        assert needle not in raw


def test_secret_looking_names_with_harmless_values_are_kept(journal: Journal) -> None:
    facts = {
        "PasswordChangeRequired": False,
        "max_tokens_in_paged_kv_cache": 2560,
        "tokenizer_dir": "/models/llama/tokenizer",
        "ssh_host_key_fingerprint": "SHA256:abc",
        "password": "",
    }
    journal.record_facts("n1", "discover", facts)
    assert journal.latest_facts("n1")["discover"] == facts


def test_causes_and_run_messages_are_redacted(journal: Journal) -> None:
    token = "tok-abc123-registered"
    register_secret(token)
    try:
        run = journal.begin_run("up --limit n1")
        journal.transition("n1", S.FAILED, "login to https://root:calvin@10.0.0.5 failed", run_id=run)
        journal.finish_run(run, "failed", f"session {token} rejected")
    finally:
        forget_secret(token)
    assert "calvin" not in journal.history("n1")[-1].cause  # a URL password: masked by its shape
    assert token not in journal.run(run).message and "<redacted>" in journal.run(run).message


def test_messages_naming_secret_fields_are_kept_verbatim(journal: Journal) -> None:
    message = (
        "credentials.idrac.password_file: password_file: /etc/x missing; "
        "credentials.lab.password_env: environment variable RACKCTL_BMC_PASSWORD is not set; "
        "fix: export RACKCTL_BMC_PASSWORD=<the BMC password>; token=abc123 is a name, not a registered value"
    )
    run = journal.begin_run("up")
    journal.transition("n1", S.FAILED, message, run_id=run)
    journal.finish_run(run, "failed", message)
    assert journal.history("n1")[-1].cause == message
    assert journal.run(run).message == message


def test_latest_facts_are_per_stage(journal: Journal) -> None:
    journal.record_facts("n1", "discover", {"gpus": 4})
    journal.record_facts("n1", "discover", {"gpus": 8})
    journal.record_facts("n1", "nvidia", {"driver": "550.90.07"})
    assert journal.latest_facts("n1") == {"discover": {"gpus": 8}, "nvidia": {"driver": "550.90.07"}}
    with pytest.raises(InvalidInput, match="not JSON data"):
        journal.record_facts("n1", "discover", {"when": object()})


def test_threads_of_one_run_write_concurrently(journal: Journal) -> None:
    run = journal.begin_run("up")
    nodes = [f"w{i}" for i in range(8)]
    journal.register_nodes(nodes)
    errors: list[BaseException] = []

    def work(node: str) -> None:
        try:
            for i in range(15):
                with journal.step(run, node, "discover", f"s{i}") as step:
                    step.detail = {"i": i}
                journal.record_facts(node, "discover", {"i": i})
            walk(journal, node, S.DISCOVERED, S.CONFIGURED)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(journal.steps(run_id=run)) == 8 * 15 * 2
    assert all(journal.state(n) is S.CONFIGURED for n in nodes)
    assert all(journal.latest_facts(n) == {"discover": {"i": 14}} for n in nodes)


def test_readonly_journal_never_creates_or_writes(tmp_path: Path) -> None:
    state = tmp_path / "fresh"
    with Journal(state, readonly=True) as j:
        assert j.nodes() == {}
        with pytest.raises(InvalidInput, match="read-only"):
            j.register_nodes(["a"])
    assert not state.exists()
    with Journal(tmp_path) as j:
        j.register_nodes(["a"])
    with Journal(tmp_path, readonly=True) as j:
        assert j.state("a") is S.REGISTERED
        with pytest.raises(InvalidInput, match="read-only"):
            j.transition("a", S.DISCOVERED, "x")


def test_run_of_a_dead_process_is_marked_interrupted(tmp_path: Path) -> None:
    code = (
        "import sys, os; from pathlib import Path; from bootstrap.journal.store import Journal\n"
        "j = Journal(Path(sys.argv[1])); print(j.begin_run('up')); sys.stdout.flush(); os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    dead_run = int(out.stdout.strip())
    with Journal(tmp_path) as j:
        assert j.run(dead_run).status == "running"
        mine = j.begin_run("up")
        assert j.run(dead_run).status == "interrupted"
        assert "ended without finishing" in j.run(dead_run).message
        assert j.run(mine).status == "running"


def test_one_up_at_a_time_per_state_dir(tmp_path: Path) -> None:
    with (
        Journal(tmp_path) as a,
        Journal(tmp_path) as b,
        a.run_lock(),
        pytest.raises(JournalBusy, match="another rackctl run holds"),
        b.run_lock(),
    ):
        pass
    with Journal(tmp_path) as b, b.run_lock():  # released
        pass


def test_history_as_dict_is_json(journal: Journal) -> None:
    walk(journal, "n1", S.DISCOVERED)
    data = json.loads(json.dumps([t.as_dict() for t in journal.history("n1")]))
    assert data[-1]["from"] == "registered" and data[-1]["to"] == "discovered"
