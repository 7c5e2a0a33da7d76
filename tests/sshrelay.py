"""An SSH ``ProxyCommand`` for tests: relay stdin/stdout to the loopback sshd that stands in for a node.

``python tests/sshrelay.py MAP.json HOST PORT``: MAP maps a node address to the port of its sshd on
127.0.0.1 (tests/sshnode.py). It plays the part of an environment's proxy (the lab's namespace relay), so
that the rendered inventory's real node addresses, users and pinned host keys are used unchanged.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path


def main(argv: list[str]) -> int:
    mapping = json.loads(Path(argv[0]).read_text())
    host = argv[1]
    if host not in mapping:
        print(f"sshrelay: no test node at {host}", file=sys.stderr)
        return 1
    sock = socket.create_connection(("127.0.0.1", int(mapping[host])), timeout=10)
    sock.settimeout(None)

    def upstream() -> None:
        while data := sys.stdin.buffer.read1(65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, daemon=True).start()
    while data := sock.recv(65536):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
