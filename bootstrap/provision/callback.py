"""The callback receiver: nodes being installed report here, each with its one-time token.

``GET|POST /callback/<hostname>?token=...&status=ok|error&detail=...`` (nginx on the head node proxies
``/callback/`` here unchanged). A token is accepted once: the first valid call records the node's report
and burns the token; a replay, a wrong token or an unknown node gets 403/404 and changes nothing.
Tokens are never logged or echoed. The receiver listens on a socket it is given (so that the lab can
hand it one created inside its network namespace) or on 127.0.0.1 with an ephemeral port.
"""

from __future__ import annotations

import hmac
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

MAX_DETAIL = 500


@dataclass
class CallbackReport:
    """What a node reported."""

    hostname: str
    status: str  #: "ok" | "error"
    detail: str
    received_at: float
    peer: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class _State:
    tokens: dict[str, str] = field(default_factory=dict)
    reports: dict[str, CallbackReport] = field(default_factory=dict)
    rejected: list[dict[str, str]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)


class CallbackReceiver:
    """A tiny HTTP server thread; :meth:`arm` a node with its token, :meth:`wait` for its report."""

    def __init__(self, sock: socket.socket | None = None, host: str = "127.0.0.1") -> None:
        self._state = _State()
        state = self._state

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return  # the query holds a token: never logged

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 65536)).decode(errors="replace") if length else ""
                self._answer(body)

            def _answer(self, body: str = "") -> None:
                url = urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                query = parse_qs(url.query)
                if body and "=" in body:
                    for key, values in parse_qs(body).items():
                        query.setdefault(key, values)
                code, text = _accept(state, parts, query, self.client_address[0])
                data = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer((host, 0), Handler, bind_and_activate=sock is None)
        if sock is not None:
            self._server.socket.close()
            self._server.socket = sock
            sock.bind((host, 0))
            sock.listen(64)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="callback", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.socket.getsockname()[1])

    @property
    def upstream(self) -> str:
        """``host:port`` for nginx's ``proxy_pass``."""
        host, port = self._server.socket.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> CallbackReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> CallbackReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def arm(self, hostname: str, token: str) -> None:
        """Expect one report from ``hostname`` carrying ``token`` (forgets an earlier report)."""
        with self._state.cond:
            self._state.tokens[hostname] = token
            self._state.reports.pop(hostname, None)

    def disarm(self, hostname: str) -> None:
        """Stop accepting anything for ``hostname`` (its token is burnt)."""
        with self._state.cond:
            self._state.tokens.pop(hostname, None)

    def wait(self, hostname: str, timeout: float) -> CallbackReport | None:
        """The node's report, or None after ``timeout`` seconds without one."""
        deadline = time.monotonic() + timeout
        with self._state.cond:
            while hostname not in self._state.reports:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._state.cond.wait(left)
            return self._state.reports[hostname]

    def report(self, hostname: str) -> CallbackReport | None:
        with self._state.cond:
            return self._state.reports.get(hostname)

    @property
    def rejected(self) -> list[dict[str, str]]:
        """Refused calls (node, reason, peer): never the token."""
        with self._state.cond:
            return list(self._state.rejected)


def _accept(state: _State, parts: list[str], query: dict[str, list[str]], peer: str) -> tuple[int, str]:
    if len(parts) != 2 or parts[0] != "callback":
        return 404, "not found"
    hostname = parts[1]
    token = (query.get("token") or [""])[0]
    status = (query.get("status") or [""])[0]
    detail = (query.get("detail") or [""])[0][:MAX_DETAIL]
    with state.cond:
        expected = state.tokens.get(hostname)
        if expected is None:
            reason = "already reported" if hostname in state.reports else "no install expected"
            state.rejected.append({"hostname": hostname, "reason": reason, "peer": peer})
            return (409 if hostname in state.reports else 404), reason
        if not hmac.compare_digest(token.encode(), expected.encode()):
            state.rejected.append({"hostname": hostname, "reason": "bad token", "peer": peer})
            return 403, "bad token"
        if status not in ("ok", "error"):
            return 400, "status must be ok or error"
        del state.tokens[hostname]  # one-time
        state.reports[hostname] = CallbackReport(hostname, status, detail, time.time(), peer)
        state.cond.notify_all()
    return 200, "recorded"
