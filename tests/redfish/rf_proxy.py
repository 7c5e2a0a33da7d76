"""Real local HTTP servers for the robustness tests (not mocks: real sockets, real HTTP).

- :class:`BmcProxy`: a reverse proxy in front of one emulated iDRAC that adds what the emulator does not
  do itself: paged collections (``Members@odata.nextLink``), 403 answers on chosen paths, one 401 on a
  chosen path (a session the BMC says it forgot), and a login
  whose answer arrives late (the session is made on the emulator at once, the answer is held back).
- :class:`SlowServer`: a TCP server that answers a request one byte at a time (``trickle``) or never
  (``silent``), to prove total deadlines.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class BmcProxy:
    """Plain-HTTP reverse proxy to ``upstream`` (``https://127.0.0.1:PORT``, verified with ``ca_file``)."""

    def __init__(self, upstream: str, ca_file: Path) -> None:
        self.upstream = urlparse(upstream)
        self.ctx = ssl.create_default_context(cafile=str(ca_file))
        self.page_size = 0
        self.forbidden: set[tuple[str, str]] = set()
        self.unauthorized_once: set[tuple[str, str]] = set()
        self.login_delay_s = 0.0
        self.pages_served = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        parsed = urlparse(req.path)
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else None
        if (req.command, parsed.path) in self.forbidden:
            self._send(req, 403, {}, _error("Base.1.12.InsufficientPrivilege", "Insufficient privilege."))
            return
        if (req.command, parsed.path) in self.unauthorized_once:  # as if the BMC forgot the session
            self.unauthorized_once.discard((req.command, parsed.path))
            self._send(req, 401, {}, _error("Base.1.12.NoValidSession", "There is no valid session."))
            return
        query = dict(parse_qsl(parsed.query, keep_blank_values=True))
        skip = int(query.pop("$skip", "0"))
        upstream_path = parsed.path + (f"?{urlencode(query, safe='$().=*~')}" if query else "")
        conn = http.client.HTTPSConnection(self.upstream.hostname, self.upstream.port, context=self.ctx, timeout=30)
        headers = {k: v for k, v in req.headers.items() if k.lower() not in HOP}
        conn.request(req.command, upstream_path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        out_headers = {k: v for k, v in resp.getheaders() if k.lower() not in HOP}
        conn.close()
        if req.command == "POST" and parsed.path.endswith("/Sessions") and self.login_delay_s:
            time.sleep(self.login_delay_s)  # the session exists upstream; its answer comes late
        if req.command == "GET" and self.page_size and resp.status == 200:
            data = self._page(data, parsed.path, query, skip)
        self._send(req, resp.status, out_headers, data)

    def _page(self, data: bytes, path: str, query: dict[str, str], skip: int) -> bytes:
        doc = json.loads(data or b"{}")
        members = doc.get("Members")
        if not isinstance(members, list) or (len(members) <= self.page_size and not skip):
            return data
        doc["Members"] = members[skip : skip + self.page_size]
        self.pages_served += 1
        if skip + self.page_size < len(members):
            nxt = dict(query, **{"$skip": str(skip + self.page_size)})
            doc["Members@odata.nextLink"] = f"{path}?{urlencode(nxt, safe='$().=*~')}"
        return json.dumps(doc).encode()

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes | dict) -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        req.send_response(status)
        for key, value in headers.items():
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)


def _error(message_id: str, message: str) -> dict:
    return {"error": {"code": message_id, "message": message,
                      "@Message.ExtendedInfo": [{"MessageId": message_id, "Message": message}]}}  # fmt: skip


@contextmanager
def bmc_proxy(upstream: str, ca_file: Path) -> Iterator[BmcProxy]:
    proxy = BmcProxy(upstream, ca_file)
    try:
        yield proxy
    finally:
        proxy.close()


class SlowServer:
    """``trickle``: answer every request with a status line, then one byte every ``interval_s`` forever;
    ``silent``: accept and never answer."""

    def __init__(self, mode: str, interval_s: float = 0.3) -> None:
        self.mode = mode
        self.interval_s = interval_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self.mode == "silent":
                self._stop.wait()
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not self._stop.wait(self.interval_s):
                conn.sendall(b"X")  # a header line that never ends
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        for conn in self._conns:
            conn.close()
