"""The run journal: one SQLite file (WAL) under the state directory.

It holds each node's lifecycle state and every transition (time, run, cause), the runs, the steps of each
stage (started / completed / failed / interrupted, destructive or not) and the facts stages learnt.
Completed steps count for the node's current *epoch*: a move that undoes progress (a reimage, a retry
from an earlier state, ready -> joined) starts a new epoch, so that work is done again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from bootstrap.errors import EnvironmentMissing, InvalidInput, RackctlError
from bootstrap.journal.secrets import refuse_secrets
from bootstrap.journal.states import NodeState, check_transition, is_backward
from redfish_tools.secrets import redact

JOURNAL_FILE = "journal.sqlite3"
LOCK_FILE = "up.lock"
SCHEMA_VERSION = 1
#: step key under which the runner records that a whole stage completed on a node
STAGE_STEP = "__stage__"
#: the status of a stage step that rendered and validated but applied nothing (never "completed")
STEP_RENDERED = "rendered"

_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started TEXT NOT NULL, finished TEXT, command TEXT NOT NULL,
    status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', pid INTEGER, host TEXT
);
CREATE TABLE node_state (
    node TEXT PRIMARY KEY, state TEXT NOT NULL, since TEXT NOT NULL,
    failed_from TEXT, maintenance_from TEXT, epoch INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run INTEGER REFERENCES runs(id), node TEXT NOT NULL,
    from_state TEXT, to_state TEXT NOT NULL, at TEXT NOT NULL, cause TEXT NOT NULL
);
CREATE INDEX transitions_node ON transitions(node, id);
CREATE TABLE steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run INTEGER REFERENCES runs(id), node TEXT NOT NULL,
    stage TEXT NOT NULL, step TEXT NOT NULL, status TEXT NOT NULL, destructive INTEGER NOT NULL,
    epoch INTEGER NOT NULL, at TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX steps_key ON steps(node, stage, step, id);
CREATE TABLE facts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, stage TEXT NOT NULL,
    at TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX facts_node ON facts(node, stage, id);
"""


def now() -> str:
    """Current UTC time, ISO 8601 with microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class NodeStatus:
    """Where a node is now."""

    node: str
    state: NodeState
    since: str
    failed_from: NodeState | None
    maintenance_from: NodeState | None
    epoch: int

    def left_from(self) -> NodeState | None:
        """The state a failed or maintenance node left."""
        if self.state is NodeState.MAINTENANCE:
            return self.maintenance_from
        if self.state is NodeState.FAILED:
            return self.failed_from
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "state": self.state.value,
            "since": self.since,
            "left_from": (lf.value if (lf := self.left_from()) else None),
            "epoch": self.epoch,
        }


@dataclass(frozen=True)
class Transition:
    """One recorded move of a node."""

    run: int | None
    node: str
    from_state: NodeState | None
    to_state: NodeState
    at: str
    cause: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "node": self.node,
            "from": self.from_state.value if self.from_state else None,
            "to": self.to_state.value,
            "at": self.at,
            "cause": self.cause,
        }


@dataclass(frozen=True)
class StepRecord:
    """One recorded status of a step."""

    run: int | None
    node: str
    stage: str
    step: str
    status: str
    destructive: bool
    epoch: int
    at: str
    detail: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class RunRecord:
    """One ``rackctl up`` (or other journalled command)."""

    id: int
    started: str
    finished: str | None
    command: str
    status: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class JournalBusy(RackctlError):
    """Another process holds the run lock of this state directory."""


@dataclass
class StepHandle:
    """Context manager journalling one step; see :meth:`Journal.step`."""

    journal: Journal
    run_id: int | None
    node: str
    stage: str
    key: str
    destructive: bool
    already_done: bool
    interrupted: bool
    previous: StepRecord | None
    #: set by the caller: recorded with the completion (secrets refused)
    detail: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> StepHandle:
        if not self.already_done:
            self.journal.record_step(
                self.run_id, self.node, self.stage, self.key, status="started", destructive=self.destructive
            )
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if self.already_done:
            return False
        if exc is None:
            status, detail = "completed", self.detail
        elif isinstance(exc, Exception):
            status, detail = "failed", {**self.detail, "error": f"{type(exc).__name__}: {exc}"}
        else:  # KeyboardInterrupt, SystemExit: the step may be half done
            status, detail = "interrupted", {**self.detail, "error": type(exc).__name__}
        self.journal.record_step(
            self.run_id,
            self.node,
            self.stage,
            self.key,
            status=status,
            destructive=self.destructive,
            detail=detail,
        )
        return False


class Journal:
    """The run journal of one state directory. Safe to share between threads of one process."""

    def __init__(self, state_dir: Path, *, readonly: bool = False) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / JOURNAL_FILE
        self.readonly = readonly
        self._lock = threading.RLock()
        self._conn = self._connect()

    # -- connection and schema -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self.readonly and not self.path.exists():
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return conn
        if self.readonly:
            return self._connect_readonly()
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        except (OSError, sqlite3.OperationalError) as exc:
            raise self._unwritable(exc) from None
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a completed step survives a power cut
            self._migrate(conn)
        except sqlite3.OperationalError as exc:  # read-only file or mount, full disk: the journal is fine
            conn.close()
            raise self._unwritable(exc) from None
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._unreadable(exc) from exc
        return conn

    def _connect_readonly(self) -> sqlite3.Connection:
        """Open for reading only; on a read-only mount (no -shm/-wal can be made) as an immutable file."""
        uri = self.path.resolve().as_uri()
        failure: sqlite3.OperationalError | None = None
        for query in ("mode=ro", "mode=ro&immutable=1"):
            conn = sqlite3.connect(f"{uri}?{query}", uri=True, check_same_thread=False, isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout = 30000")
                self._migrate(conn)
                conn.execute("SELECT count(*) FROM runs").fetchone()
            except sqlite3.OperationalError as exc:
                conn.close()
                if "no such table" in str(exc):
                    raise InvalidInput(
                        f"{self.path} is not a rackctl journal ({exc}); pass the right --state-dir"
                    ) from None
                failure = exc
                continue
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise self._unreadable(exc) from exc
            return conn
        raise InvalidInput(
            f"cannot open the journal {self.path} for reading ({failure}); "
            f"check that this user may read {self.state_dir} and the file"
        )

    def _unreadable(self, exc: sqlite3.DatabaseError) -> InvalidInput:
        return InvalidInput(f"{self.path} is not a readable rackctl journal ({exc}); move it aside to start afresh")

    def _unwritable(self, exc: BaseException) -> InvalidInput:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return InvalidInput(
            f"cannot write the journal in {self.state_dir} ({reason}); pass --state-dir a writable directory "
            "or fix its permissions or mount; the journal itself is intact (`rackctl journal show` reads it)"
        )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise EnvironmentMissing(
                f"{self.path} has journal schema {version}; this rackctl knows up to {SCHEMA_VERSION}: upgrade rackctl"
            )
        if version == 0 and not self.readonly:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (serialised across threads, and across processes by SQLite)."""
        if self.readonly:
            raise InvalidInput("the journal was opened read-only (plan); nothing may be written")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            cur = self._conn.execute(sql, tuple(params))
            cur.row_factory = sqlite3.Row
            return cur.fetchall()

    # -- nodes and transitions -------------------------------------------------------------------
    def register_nodes(self, names: Iterable[str], *, run_id: int | None = None) -> list[str]:
        """Add nodes not yet known, in state ``registered``. Returns the newly added names."""
        added: list[str] = []
        with self._tx() as conn:
            for name in names:
                if conn.execute("SELECT 1 FROM node_state WHERE node = ?", (name,)).fetchone():
                    continue
                at = now()
                conn.execute(
                    "INSERT INTO node_state (node, state, since) VALUES (?, ?, ?)",
                    (name, NodeState.REGISTERED.value, at),
                )
                conn.execute(
                    "INSERT INTO transitions (run, node, from_state, to_state, at, cause) VALUES (?, ?, NULL, ?, ?, ?)",
                    (run_id, name, NodeState.REGISTERED.value, at, "registered from the inventory"),
                )
                added.append(name)
        return added

    def nodes(self) -> dict[str, NodeStatus]:
        """Every known node and its status."""
        return {row["node"]: _status(row) for row in self._query("SELECT * FROM node_state ORDER BY node")}

    def status(self, node: str) -> NodeStatus:
        """The node's state, since when, and the state a failed/maintenance node left."""
        rows = self._query("SELECT * FROM node_state WHERE node = ?", (node,))
        if not rows:
            raise InvalidInput(
                f"node {node!r} is not in the journal {self.path}; `rackctl up` registers the inventory's nodes"
            )
        return _status(rows[0])

    def state(self, node: str) -> NodeState:
        """The node's current lifecycle state."""
        return self.status(node).state

    def transition(
        self, node: str, to: NodeState, cause: str, *, run_id: int | None = None, force: bool = False
    ) -> Transition:
        """Move ``node`` to ``to``; raises :class:`InvalidTransition` when the state machine refuses."""
        to = NodeState(to)
        if not cause.strip():
            raise InvalidInput(f"node {node!r}: a transition to {to.value} needs a cause")
        cause = redact(cause)
        with self._tx() as conn:
            cur = conn.execute("SELECT * FROM node_state WHERE node = ?", (node,))
            cur.row_factory = sqlite3.Row
            row = cur.fetchone()
            if row is None:
                raise InvalidInput(f"node {node!r} is not in the journal; register it first")
            current = _status(row)
            left_from = current.left_from()
            check_transition(node, current.state, to, left_from=left_from, force=force)
            epoch = current.epoch + (1 if is_backward(current.state, to, left_from=left_from) else 0)
            failed_from, maint_from = current.failed_from, current.maintenance_from
            if to is NodeState.FAILED and current.state is not NodeState.MAINTENANCE:
                failed_from = current.state
            elif to is NodeState.MAINTENANCE:
                maint_from = current.state
            if current.state is NodeState.MAINTENANCE:
                maint_from = None
            if current.state is NodeState.FAILED and to is not NodeState.MAINTENANCE:
                failed_from = None
            at = now()
            conn.execute(
                "UPDATE node_state SET state = ?, since = ?, failed_from = ?, maintenance_from = ?, "
                "epoch = ? WHERE node = ?",
                (to.value, at, _val(failed_from), _val(maint_from), epoch, node),
            )
            conn.execute(
                "INSERT INTO transitions (run, node, from_state, to_state, at, cause) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, node, current.state.value, to.value, at, cause),
            )
        return Transition(run_id, node, current.state, to, at, cause)

    def history(self, node: str) -> list[Transition]:
        """Every transition of ``node``, oldest first."""
        rows = self._query("SELECT * FROM transitions WHERE node = ? ORDER BY id", (node,))
        return [
            Transition(
                r["run"],
                r["node"],
                NodeState(r["from_state"]) if r["from_state"] else None,
                NodeState(r["to_state"]),
                r["at"],
                r["cause"],
            )
            for r in rows
        ]

    # -- runs --------------------------------------------------------------------------------------
    def begin_run(self, command: str) -> int:
        """Start a run (marking runs of dead processes on this host as interrupted); returns its id."""
        host = socket.gethostname()
        with self._tx() as conn:
            stale = conn.execute("SELECT id, pid FROM runs WHERE status = 'running' AND host = ?", (host,))
            for run_id, pid in stale.fetchall():
                if not _pid_alive(pid):
                    conn.execute(
                        "UPDATE runs SET status = 'interrupted', finished = ?, message = ? WHERE id = ?",
                        (now(), f"process {pid} ended without finishing the run", run_id),
                    )
            cur = conn.execute(
                "INSERT INTO runs (started, command, status, pid, host) VALUES (?, ?, 'running', ?, ?)",
                (now(), redact(command), os.getpid(), host),
            )
            return int(cur.lastrowid or 0)

    def finish_run(self, run_id: int, status: str, message: str = "") -> None:
        """Record how a run ended (completed, not_applied, failed, not_implemented, interrupted)."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE runs SET status = ?, finished = ?, message = ? WHERE id = ?",
                (status, now(), redact(message), run_id),
            )

    def runs(self, limit: int = 20) -> list[RunRecord]:
        """The latest runs, newest first."""
        rows = self._query("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (limit,))
        return [RunRecord(r["id"], r["started"], r["finished"], r["command"], r["status"], r["message"]) for r in rows]

    def runs_with_failed_steps(self) -> set[int]:
        """The ids of the runs that recorded a failed step (one scan of the steps)."""
        rows = self._query("SELECT DISTINCT run FROM steps WHERE status = 'failed' AND run IS NOT NULL")
        return {int(r[0]) for r in rows}

    def run_count(self) -> int:
        """How many runs the journal holds."""
        return int(self._query("SELECT COUNT(*) FROM runs")[0][0])

    def run(self, run_id: int) -> RunRecord:
        """One run by id."""
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise InvalidInput(f"no run {run_id} in {self.path}")
        r = rows[0]
        return RunRecord(r["id"], r["started"], r["finished"], r["command"], r["status"], r["message"])

    @contextlib.contextmanager
    def run_lock(self) -> Iterator[None]:
        """Hold the state directory's run lock: one ``up`` at a time."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / LOCK_FILE, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise JournalBusy(
                    f"another rackctl run holds {self.state_dir / LOCK_FILE} ({holder}); "
                    "wait for it to finish or use another --state-dir"
                ) from None
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()}")
            fh.flush()
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- steps -------------------------------------------------------------------------------------
    def record_step(
        self,
        run_id: int | None,
        node: str,
        stage: str,
        key: str,
        *,
        status: str,
        destructive: bool,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Append one status of a step (prefer :meth:`step`)."""
        detail = dict(detail or {})
        refuse_secrets(detail, f"the detail of step {stage}/{key} on {node}")
        if "error" in detail:
            detail["error"] = redact(str(detail["error"]))
        text = json.dumps(detail, default=str, sort_keys=True)
        with self._tx() as conn:
            epoch_row = conn.execute("SELECT epoch FROM node_state WHERE node = ?", (node,)).fetchone()
            if epoch_row is None:
                raise InvalidInput(f"node {node!r} is not in the journal; register it first")
            conn.execute(
                "INSERT INTO steps (run, node, stage, step, status, destructive, epoch, at, detail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, node, stage, key, status, int(destructive), epoch_row[0], now(), text),
            )

    def last_step(self, node: str, stage: str, key: str, *, any_epoch: bool = False) -> StepRecord | None:
        """The latest record of a step in the node's current epoch (or any epoch)."""
        sql = "SELECT s.* FROM steps s JOIN node_state n ON n.node = s.node WHERE s.node = ? AND s.stage = ? "
        sql += "AND s.step = ? " + ("" if any_epoch else "AND s.epoch = n.epoch ") + "ORDER BY s.id DESC LIMIT 1"
        rows = self._query(sql, (node, stage, key))
        return _step(rows[0]) if rows else None

    def step(
        self,
        run_id: int | None,
        node: str,
        stage: str,
        key: str,
        *,
        destructive: bool = False,
        force: bool = False,
    ) -> StepHandle:
        """A context manager recording a step started, then completed / failed / interrupted.

        ``.already_done``: it completed before in this epoch and ``force`` is off, so skip it (nothing is
        recorded). ``.interrupted``: an earlier attempt never finished (a crash or Ctrl-C).
        """
        previous = self.last_step(node, stage, key)
        done = previous is not None and previous.status == "completed" and not force
        interrupted = previous is not None and previous.status in ("started", "interrupted")
        return StepHandle(self, run_id, node, stage, key, destructive, done, interrupted, previous)

    def steps(self, *, node: str | None = None, run_id: int | None = None) -> list[StepRecord]:
        """Recorded step statuses, oldest first, optionally for one node and/or run."""
        sql = "SELECT * FROM steps WHERE 1 = 1"
        params: list[Any] = []
        if node is not None:
            sql, params = sql + " AND node = ?", [*params, node]
        if run_id is not None:
            sql, params = sql + " AND run = ?", [*params, run_id]
        return [_step(r) for r in self._query(sql + " ORDER BY id", params)]

    def stage_done(self, node: str, stage: str) -> StepRecord | None:
        """The record saying ``stage`` completed on ``node`` in its current epoch, if any."""
        record = self.last_step(node, stage, STAGE_STEP)
        return record if record is not None and record.status == "completed" else None

    def not_applied(self, node: str) -> list[StepRecord]:
        """The stages whose latest outcome on ``node`` (current epoch) is rendered, not applied; oldest first."""
        sql = (
            "SELECT s.* FROM steps s JOIN node_state n ON n.node = s.node WHERE s.node = ? AND s.step = ? "
            "AND s.epoch = n.epoch AND s.id = (SELECT MAX(t.id) FROM steps t WHERE t.node = s.node "
            "AND t.stage = s.stage AND t.step = s.step AND t.epoch = s.epoch) AND s.status = ? ORDER BY s.id"
        )
        return [_step(r) for r in self._query(sql, (node, STAGE_STEP, STEP_RENDERED))]

    # -- facts -------------------------------------------------------------------------------------
    def record_facts(self, node: str, stage: str, facts: dict[str, Any]) -> None:
        """Store what ``stage`` learnt about ``node``; raises ``SecretRefused`` for secret-looking data."""
        refuse_secrets(facts, f"facts of {node} from stage {stage}")
        try:
            text = json.dumps(facts, sort_keys=True)
        except TypeError as exc:
            raise InvalidInput(f"facts of {node} from stage {stage} are not JSON data: {exc}") from exc
        with self._tx() as conn:
            conn.execute("INSERT INTO facts (node, stage, at, data) VALUES (?, ?, ?, ?)", (node, stage, now(), text))

    def latest_facts(self, node: str) -> dict[str, dict[str, Any]]:
        """The latest facts of ``node`` per stage: ``{stage: facts}``."""
        rows = self._query(
            "SELECT stage, data FROM facts WHERE id IN (SELECT MAX(id) FROM facts WHERE node = ? GROUP BY stage)",
            (node,),
        )
        return {r["stage"]: json.loads(r["data"]) for r in rows}


def _val(state: NodeState | None) -> str | None:
    return state.value if state is not None else None


def _status(row: sqlite3.Row) -> NodeStatus:
    return NodeStatus(
        row["node"],
        NodeState(row["state"]),
        row["since"],
        NodeState(row["failed_from"]) if row["failed_from"] else None,
        NodeState(row["maintenance_from"]) if row["maintenance_from"] else None,
        row["epoch"],
    )


def _step(row: sqlite3.Row) -> StepRecord:
    return StepRecord(
        row["run"],
        row["node"],
        row["stage"],
        row["step"],
        row["status"],
        bool(row["destructive"]),
        row["epoch"],
        row["at"],
        json.loads(row["detail"]),
    )


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
