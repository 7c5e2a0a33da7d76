"""The stage runner: order, stop at unimplemented (4) / failed (1) / Ctrl-C (130), resume, --force, --from."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOT_IMPLEMENTED, EXIT_OK, InvalidInput
from bootstrap.inventory import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.base import STAGE_ORDER, RunOptions, StageContext
from bootstrap.stages.runner import Runner, plan, select
from redfish_tools.secrets import forget_secret, register_secret

from .conftest import Recorder, make_all, make_stage

S = NodeState


def up(inventory: Inventory, state: Path, **kw: object) -> object:
    force = bool(kw.pop("force", False))
    options = RunOptions(force=force, yes=bool(kw.pop("yes", True)))
    selection = select(inventory, force=force, **kw)  # type: ignore[arg-type]
    return Runner(inventory, state, selection, options=options).run()


def states(state: Path) -> dict[str, NodeState]:
    with Journal(state, readonly=True) as j:
        return {n: s.state for n, s in j.nodes().items()}


def test_all_placeholders_stop_at_preflight(registry: dict, inventory: Inventory, tmp_path: Path) -> None:
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_NOT_IMPLEMENTED
    assert out.message == "stage 'preflight' is not implemented yet; the run stopped here; completed: none"
    assert [s.status for s in out.stages] == ["not_implemented"] + ["not_run"] * (len(STAGE_ORDER) - 1)
    with Journal(tmp_path, readonly=True) as j:
        assert j.run(out.run_id).status == "not_implemented"
        assert set(j.nodes()) == {n.hostname for n in inventory.nodes}


def test_stops_at_first_unimplemented_and_resumes_without_repeating(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    make_stage("preflight", rec)
    make_stage("discover", rec)
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_NOT_IMPLEMENTED
    assert out.message == (
        "stage 'firmware' is not implemented yet; the run stopped here; completed: preflight, discover"
    )
    assert set(states(tmp_path).values()) == {S.DISCOVERED}
    assert rec.count("preflight") == rec.count("discover") == len(hostnames)

    again = up(inventory, tmp_path)
    assert again.exit_code == EXIT_NOT_IMPLEMENTED
    assert again.message.endswith("completed: preflight, discover")
    assert rec.count("preflight") == rec.count("discover") == len(hostnames), "resume repeated work"
    assert [s.status for s in again.stages[:3]] == ["skipped", "skipped", "not_implemented"]
    reasons = {v["message"] for v in again.stages[0].nodes.values()}
    assert all(r.startswith("completed in run ") for r in reasons)
    assert {v["message"] for v in again.stages[1].nodes.values()} == {"already discovered"}


def test_force_and_from_rerun_completed_stages(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    make_stage("preflight", rec)
    make_stage("discover", rec)
    up(inventory, tmp_path)
    n = len(hostnames)
    up(inventory, tmp_path, from_stage="discover")
    assert (rec.count("preflight"), rec.count("discover")) == (n, 2 * n)
    up(inventory, tmp_path, force=True)
    assert (rec.count("preflight"), rec.count("discover")) == (2 * n, 3 * n)


def test_full_run_walks_every_node_to_ready(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    make_all(rec)
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_OK, out.message
    assert out.message == f"completed: {', '.join(STAGE_ORDER)}"
    assert set(states(tmp_path).values()) == {S.READY}
    with Journal(tmp_path, readonly=True) as j:
        path = [t.to_state for t in j.history(hostnames[0])]
    assert path == [
        S.REGISTERED,
        S.DISCOVERED,
        S.CONFIGURED,
        S.PROVISIONING,
        S.PROVISIONED,
        S.JOINED,
        S.READY,
    ]
    before = len(rec.effects)
    assert up(inventory, tmp_path).exit_code == EXIT_OK
    assert len(rec.effects) == before, "a second up on a finished rack must do nothing"


def test_failing_node_goes_to_failed_others_carry_on_then_retry(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    bad = hostnames[-1]
    broken = {"on": True}
    make_all(
        rec,
        provision={
            "fail": lambda node, step: (
                "PXE timed out after 300 s" if broken["on"] and node == bad and step == "write-image" else None
            )
        },
    )
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_FAILED
    assert f"stage 'provision' failed on {bad}" in out.message
    got = states(tmp_path)
    assert got[bad] is S.FAILED
    assert all(got[n] is S.PROVISIONED for n in hostnames if n != bad)
    assert rec.count("network") == 0, "the run must stop after the failed stage"
    with Journal(tmp_path, readonly=True) as j:
        last = j.history(bad)[-1]
        assert last.to_state is S.FAILED and "PXE timed out" in last.cause
        assert j.status(bad).left_from() is S.PROVISIONING
    assert rec.count("provision", bad, "wipe") == 1

    broken["on"] = False
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_OK, out.message
    assert rec.count("provision", bad, "wipe") == 1, "the completed destructive step was repeated"
    assert rec.count("provision", bad, "write-image") == 1
    assert all(rec.count("provision", n, "wipe") == 1 for n in hostnames)
    assert set(states(tmp_path).values()) == {S.READY}


def test_blocked_nodes_stop_the_run_with_the_reason(registry: dict, inventory: Inventory, tmp_path: Path) -> None:
    rec = Recorder()
    make_stage("kubernetes", rec)
    out = up(inventory, tmp_path, stages=["kubernetes"])
    assert out.exit_code == EXIT_FAILED
    assert "needs provisioned" in out.message and "run the earlier stages first" in out.message
    assert rec.runs == []
    assert set(states(tmp_path).values()) == {S.REGISTERED}


def test_limit_and_maintenance_select_nodes(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    make_stage("preflight", rec)
    make_stage("discover", rec)
    with Journal(tmp_path) as j:
        j.register_nodes(hostnames)
        j.transition(hostnames[1], S.MAINTENANCE, "fan replacement")
    out = up(inventory, tmp_path, stages=["preflight", "discover"], limit=hostnames[:2])
    assert out.exit_code == EXIT_OK, out.message
    assert rec.runs == [("preflight", (hostnames[0],)), ("discover", (hostnames[0],))]
    got = states(tmp_path)
    assert got[hostnames[0]] is S.DISCOVERED
    assert got[hostnames[1]] is S.MAINTENANCE
    assert all(got[n] is S.REGISTERED for n in hostnames[2:])
    assert out.stages[0].nodes[hostnames[1]] == {"status": "skip", "ok": True, "message": "in maintenance"}


def test_limit_by_role_and_glob(registry: dict, inventory: Inventory) -> None:
    workers = [n.hostname for n in inventory.nodes if n.role.value == "worker"]
    assert select(inventory, limit=["worker"]).nodes == workers
    assert select(inventory, limit=["gpu-*"]).nodes == [h for h in workers if h.startswith("gpu-")]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"stages": ["discover", "bogus"]}, "unknown stage(s): 'bogus'"),
        ({"limit": ["nosuch-node"]}, "'nosuch-node' matches no node"),
        ({"stages": ["preflight"], "from_stage": "triton"}, "selects no stage"),
    ],
)
def test_bad_selection_is_invalid_input(inventory: Inventory, kwargs: dict, needle: str) -> None:
    with pytest.raises(InvalidInput) as info:
        select(inventory, **kwargs)
    assert needle in info.value.message


def test_ctrl_c_inside_a_step_marks_run_interrupted_and_resume_finishes(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    armed = {"on": True}

    def interrupt(ctx: StageContext, node: str, step: str) -> None:
        if armed["on"] and node == hostnames[1] and step == "write-image":
            raise KeyboardInterrupt

    make_all(rec, provision={"before_step": interrupt})
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_INTERRUPTED
    assert "interrupted during provision" in out.message
    with Journal(tmp_path, readonly=True) as j:
        assert j.run(out.run_id).status == "interrupted"
        assert j.last_step(hostnames[1], "provision", "write-image").status == "interrupted"
        assert j.last_step(hostnames[0], "provision", "set-boot").status == "completed"
    armed["on"] = False
    assert up(inventory, tmp_path).exit_code == EXIT_OK
    for n in hostnames:
        assert rec.count("provision", n, "wipe") == 1
        assert rec.count("provision", n, "write-image") == 1


def test_a_crashing_stage_is_exit_1_with_a_redacted_traceback_file(
    registry: dict, inventory: Inventory, tmp_path: Path
) -> None:
    rec = Recorder()

    def crash(ctx: StageContext, node: str, step: str) -> None:
        raise ConnectionError("https://root:calvin@10.0.0.9/redfish/v1 refused")

    make_stage("preflight", rec, before_step=crash)
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_FAILED
    assert "stage 'preflight' crashed: ConnectionError" in out.message
    assert "calvin" not in out.message
    logs = list((tmp_path / "logs").glob("*.traceback.txt"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "ConnectionError" in text and "calvin" not in text
    assert set(states(tmp_path).values()) == {S.REGISTERED}


def test_destructive_stage_without_yes_and_without_terminal_refuses(
    registry: dict, inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    make_stage("preflight", rec, destructive=True)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(InvalidInput, match="pass --yes"):
        up(inventory, tmp_path, yes=False)
    assert rec.effects == []
    with Journal(tmp_path, readonly=True) as j:
        assert j.runs()[0].status == "failed"


def test_plan_projects_states_and_writes_nothing(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    for name in ("preflight", "discover", "firmware", "bios"):
        make_stage(name, rec)
    state = tmp_path / "state"
    data = plan(inventory, state, select(inventory))
    assert not state.exists()
    assert data["stops_at"] == "provision"
    by_stage = {s["name"]: s for s in data["stages"]}
    assert by_stage["bios"]["nodes_to_run"] == hostnames  # discover would bring them there
    assert by_stage["provision"]["implemented"] is False
    assert rec.effects == []

    up(inventory, state)
    data = plan(inventory, state, select(inventory))
    by_stage = {s["name"]: s for s in data["stages"]}
    assert by_stage["discover"]["nodes_to_run"] == []
    assert {a["skip"] for a in by_stage["bios"]["actions"]} == {"already configured"}
    assert data["nodes"] == dict.fromkeys(hostnames, "configured")


class ListProgress:
    """A reporter that keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def stage_started(self, stage: str, nodes: object) -> None:
        self.messages.append(f"start {stage}")

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None:
        self.messages.append(f"{stage} {node} {ok} {message}")

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None:
        self.messages.append(f"end {stage} {ok} {message}")

    def log(self, message: str) -> None:
        self.messages.append(message)


def test_progress_reports_every_node_without_secrets(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    make_stage(
        "preflight", rec, fail=lambda node, step: "login https://root:calvin@10.1.1.1 refused; BMC said hunter2-x"
    )
    progress = ListProgress()
    register_secret("hunter2-x")  # as resolving the credentials does
    try:
        out = Runner(inventory, tmp_path, select(inventory), options=RunOptions(), progress=progress).run()
    finally:
        forget_secret("hunter2-x")
    assert out.exit_code == EXIT_FAILED
    assert progress.messages[0] == "start preflight"
    assert sum(m.startswith("preflight ") for m in progress.messages) == len(hostnames)
    assert progress.messages[-1].startswith("end preflight False")
    assert not any("calvin" in m or "hunter2-x" in m for m in progress.messages)
    assert "calvin" not in out.message and "root:<redacted>@" in out.message
    assert "hunter2-x" not in out.message and "BMC said <redacted>" in out.message


def test_facts_recorded_twice_in_a_run_keep_both_records_keys(tmp_path: Path) -> None:
    """A stage recording two kinds of facts for a node (e.g. the kubernetes stage's package report, then its
    live node labels) must not hide the first behind the second: the journal shows the latest record."""
    with Journal(tmp_path) as journal:
        first = StageContext("kubernetes", None, ["n1"], journal, tmp_path, 1)
        first.record_facts("n1", {"packages": {"kubeadm": "1.31.2"}, "labels": {"changed": False}})
        first.record_facts("n1", {"labels": {"changed": True}})
        assert journal.latest_facts("n1")["kubernetes"] == {
            "packages": {"kubeadm": "1.31.2"},
            "labels": {"changed": True},
        }
        # a later run starts afresh: what it did not record is not carried over from the earlier run
        StageContext("kubernetes", None, ["n1"], journal, tmp_path, 2).record_facts("n1", {"labels": {}})
        assert journal.latest_facts("n1")["kubernetes"] == {"labels": {}}
