"""Fan an operation out over many BMCs: one session and 1-2 requests in flight per BMC, many BMCs at once.

Each BMC gets its own worker thread and :class:`~redfish_tools.connection.BmcConnection` (the one engine,
its in-flight limit ``policy.max_in_flight``), at most ``max_bmcs`` at once, so one slow iDRAC never
starves the others; a failure on one node becomes that node's result, never a crash of the run. With
``policy.deadline_s`` a node still busy at its deadline is cut there and reported as "deadline exceeded
after N s" while the others go on.

Ctrl-C (``KeyboardInterrupt`` in the waiting thread) stops the run at once: nodes not started are never
started, running operations stop at their next request (a shared cancel event, see
:class:`~redfish_tools.connection.BmcConnection`) and their requests in flight are cut on the socket;
what was logged in is logged out (within ``CANCEL_CLEANUP_S``), then :class:`FleetInterrupted` (a
``KeyboardInterrupt``) is raised with the results known so far.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from redfish_tools.connection import CANCEL_CLEANUP_S, BmcConnection, BmcTarget, ConnectionPolicy
from redfish_tools.deadline import interrupt
from redfish_tools.errors import Cancelled, RedfishError
from redfish_tools.secrets import redact

T = TypeVar("T")
log = logging.getLogger("redfish_tools.fleet")

#: Upper bound of BMCs worked on at once (a thread each, plus one helper for an operation's parallel reads);
#: each holds at most ``max_in_flight`` requests. Past ~150 BMCs at once, GIL hand-offs between the threads
#: cost more CPU than the extra concurrency saves (500 emulated BMCs at 200 ms on 2 cores: 128 -> 13.5 s,
#: 170 -> 12.6 s, 256 -> 15.7 s, 512 -> 20.5 s).
DEFAULT_MAX_BMCS = 160


@dataclass
class BmcResult(Generic[T]):
    """One node's outcome: ``value`` when ok, else ``error`` (a JSON-friendly dict with ``kind``)."""

    name: str
    ok: bool
    value: T | None = None
    error: dict[str, Any] | None = None
    seconds: float = 0.0
    requests: int = 0

    def as_dict(self, value: Callable[[T], Any] | None = None) -> dict[str, Any]:
        shown = value(self.value) if (value and self.value is not None) else self.value
        return {
            "name": self.name,
            "ok": self.ok,
            "value": shown,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "requests": self.requests,
        }


Progress = Callable[[BmcResult[Any]], None]


class FleetInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`run_fleet`: ``results`` has each node's result, None for nodes never started."""

    def __init__(self, names: Sequence[str], results: list[BmcResult[Any] | None]) -> None:
        super().__init__("interrupted (Ctrl-C)")
        self.names = list(names)
        self.results = results

    @property
    def not_started(self) -> list[str]:
        """Names of the nodes whose operation never began."""
        return [name for name, result in zip(self.names, self.results, strict=True) if _not_started(result)]


def _not_started(result: BmcResult[Any] | None) -> bool:
    return result is None or (result.requests == 0 and (result.error or {}).get("kind") == "cancelled")


def run_on_bmc(
    target: BmcTarget,
    operation: Callable[[BmcConnection], T],
    policy: ConnectionPolicy | None = None,
    *,
    on_result: Progress | None = None,
    cancel: threading.Event | None = None,
) -> BmcResult[T]:
    """Log in to one BMC, run ``operation``, always log out; never raises for the node's failure.

    ``on_result`` gets the result as soon as it is known, before the logout: a node cut at its deadline is
    reported then, not after its logout (which has ``policy.logout_deadline_s`` of its own). Once
    ``cancel`` is set the operation stops at its next request (its result: kind ``cancelled``).
    """
    start = time.monotonic()
    conn: BmcConnection | None = None
    try:
        if cancel is not None and cancel.is_set():
            raise Cancelled("interrupted (Ctrl-C) before it started", bmc=target.name)
        conn = BmcConnection(target, policy, cancel=cancel)
        conn.start_deadline()
        conn.open()
        value = operation(conn)
        result = BmcResult(target.name, True, value, None, time.monotonic() - start, conn.requests_sent)
    except RedfishError as exc:
        result = _failed(target, start, conn, exc.as_dict())
    except Exception as exc:  # a bug or an unexpected answer must not stop the other nodes
        log.debug("%s: unexpected error", target.name, exc_info=True)
        error = {"kind": "internal", "message": redact(f"{type(exc).__name__}: {exc}"), "bmc": target.name}
        result = _failed(target, start, conn, error)
    except BaseException:  # Ctrl-C: log out, then let it stop the run
        if conn is not None:
            conn.close()
        raise
    try:
        if on_result:
            on_result(result)
    finally:
        if conn is not None:
            _close(conn)
    return result


def _failed(target: BmcTarget, start: float, conn: BmcConnection | None, error: dict[str, Any]) -> BmcResult[Any]:
    sent = conn.requests_sent if conn else 0
    return BmcResult(target.name, False, None, error, time.monotonic() - start, sent)


def _close(conn: BmcConnection) -> None:
    try:
        conn.close()
    except Exception:  # a failed logout is logged by the connection; it never changes the node's result
        log.debug("%s: close failed", conn.target.name, exc_info=True)


def run_fleet(
    targets: Sequence[BmcTarget],
    operation: Callable[[BmcConnection], T],
    *,
    policy: ConnectionPolicy | None = None,
    max_bmcs: int = DEFAULT_MAX_BMCS,
    progress: Progress | None = None,
) -> list[BmcResult[T]]:
    """Run ``operation`` on every BMC concurrently; results in the order of ``targets``.

    ``progress`` is called once per node as soon as its result is known (from the worker threads, one
    call at a time).
    """
    if not targets:
        return []
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError("BMC target names must be unique")
    lock = threading.Lock()

    def report(result: BmcResult[Any]) -> None:
        if progress:
            with lock:
                progress(result)

    workers = max(1, min(len(targets), max_bmcs))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bmc")
    cancel = threading.Event()
    futures: list[Future[BmcResult[T]]] = []
    try:
        for t in targets:
            futures.append(pool.submit(run_on_bmc, t, operation, policy, on_result=report, cancel=cancel))
        results = [future.result() for future in futures]
    except BaseException as exc:
        _stop(pool, cancel, futures)
        if isinstance(exc, KeyboardInterrupt):
            partial = [f.result() if f.done() and not f.cancelled() else None for f in futures]
            partial += [None] * (len(targets) - len(partial))
            raise FleetInterrupted(names, partial) from None
        raise
    pool.shutdown(wait=True)
    return results


def _stop(pool: ThreadPoolExecutor, cancel: threading.Event, futures: list[Future[Any]]) -> None:
    """Cancel the run: drop queued nodes, cut running requests, give the logouts time to finish."""
    cancel.set()
    pool.shutdown(wait=False, cancel_futures=True)
    cut = interrupt(cancel)
    log.debug("interrupted: %d requests cut", cut)
    running = [f for f in futures if not f.done()]
    if running:
        wait(running, timeout=CANCEL_CLEANUP_S + 1.0)  # logouts are bounded by CANCEL_CLEANUP_S each


def in_parallel(width: int, *tasks: Callable[[], Any]) -> list[Any]:
    """Run ``tasks`` ``width`` at a time (this thread and ``width - 1`` helpers); results in task order.

    For the independent reads of one BMC operation; the connection still caps its requests in flight.
    The first exception is raised after every started task ended.
    """
    results: list[Any] = [None] * len(tasks)
    pending = iter(enumerate(tasks))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                item = next(pending, None)
            if item is None:
                return
            index, task = item
            try:
                results[index] = task()
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)
                return

    helpers = [threading.Thread(target=work, name="bmc-read", daemon=True) for _ in range(max(0, width - 1))]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]
    return results
