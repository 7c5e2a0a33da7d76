"""Total deadlines for HTTP requests, whatever the per-read timeouts.

urllib3/requests bound each socket read, not a whole request: a BMC trickling one byte per second holds a
request forever under a 3 s read timeout. Here every request runs inside :func:`bounded` with an absolute
deadline; the connections of :class:`DeadlineAdapter` tell the running request which socket they read, and
one watchdog thread (shared by every BMC) shuts that socket down when the deadline passes, so the blocked
read returns at once and the caller raises :class:`~redfish_tools.errors.DeadlineExceeded`.

The same socket shutdown serves cancellation (Ctrl-C): a request run with a cancel ``threading.Event``
is cut by :func:`interrupt` at once, so worker threads never wait out a socket timeout.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_local = threading.local()


class Slot:
    """One bounded request: its deadline, the socket it reads now, whether the watchdog or a cancel cut it."""

    __slots__ = ("cancel", "cancelled", "deadline", "expired", "sock")

    def __init__(self, deadline: float, cancel: threading.Event | None = None) -> None:
        self.deadline = deadline
        self.cancel = cancel
        self.sock: socket.socket | None = None
        self.expired = False
        self.cancelled = False

    def interrupt(self) -> None:
        """Cut the request because its cancel event was set (not a deadline)."""
        self.cancelled = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def cut(self) -> None:
        """Shut the socket down (the plain-socket shutdown: the TLS state is left to the reading thread)."""
        self.expired = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread holding a heap of deadlines; cuts the slots whose deadline passed."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Slot]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self.live: set[Slot] = set()  # slots of requests running now (for :func:`interrupt`)

    @property
    def lock(self) -> threading.Condition:
        return self._cond

    def watch(self, slot: Slot) -> None:
        with self._cond:
            heapq.heappush(self._heap, (slot.deadline, next(self._seq), slot))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="redfish-deadline", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is slot:
                self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._heap:
                    self._cond.wait(30.0)
                    if not self._heap:
                        self._thread = None
                        return
                    continue
                deadline, _, slot = self._heap[0]
                now = time.monotonic()
                if deadline > now:
                    self._cond.wait(deadline - now)
                    continue
                heapq.heappop(self._heap)
                if slot.sock is not None or not slot.expired:
                    slot.cut()


_watchdog = _Watchdog()


@contextlib.contextmanager
def bounded(deadline: float, cancel: threading.Event | None = None) -> Iterator[Slot]:
    """Run the HTTP request made in this block under an absolute ``time.monotonic()`` deadline.

    After the block, ``slot.expired`` says whether the watchdog cut it (the caller maps any error then to
    a deadline error), ``slot.cancelled`` whether :func:`interrupt` did for ``cancel``. Finished slots stay
    on the heap until their time and are then ignored (cheap).
    """
    slot = Slot(deadline, cancel)
    previous = getattr(_local, "slot", None)
    _local.slot = slot
    _watchdog.watch(slot)
    if cancel is not None:
        with _watchdog.lock:
            _watchdog.live.add(slot)
    try:
        yield slot
    finally:
        _local.slot = previous
        with _watchdog.lock:  # never cut a socket that went back to the pool for another request
            slot.sock = None
            _watchdog.live.discard(slot)


def interrupt(cancel: threading.Event) -> int:
    """Cut every running request bounded with ``cancel`` (call after setting it); returns how many."""
    with _watchdog.lock:
        slots = [slot for slot in _watchdog.live if slot.cancel is cancel]
        for slot in slots:
            slot.interrupt()
    return len(slots)


def _track(sock: socket.socket | None) -> None:
    slot: Slot | None = getattr(_local, "slot", None)
    if slot is not None and sock is not None:
        slot.sock = sock
        if time.monotonic() >= slot.deadline:
            slot.cut()
        elif slot.cancel is not None and slot.cancel.is_set():
            slot.interrupt()  # cancelled between the check before the request and this socket


class _Tracking:
    """Mixed into urllib3's connection classes: every socket they use is watched by the deadline."""

    sock: Any

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]  # urllib3's connection, next in the MRO
        _track(sock)  # from the TCP connect on: a TLS handshake that trickles is cut too
        return sock

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _track(self.sock)

    def getresponse(self) -> Any:
        _track(self.sock)
        return super().getresponse()  # type: ignore[misc]


class _TrackedHTTPConnection(_Tracking, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracking, HTTPSConnection):
    pass


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class DeadlineAdapter(HTTPAdapter):
    """A requests adapter whose connections report their socket to the running :func:`bounded` block."""

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block=block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}
