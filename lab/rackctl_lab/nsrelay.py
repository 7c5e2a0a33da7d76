"""``python -m rackctl_lab.nsrelay NETNS HOST PORT``: relay stdin/stdout to a TCP port inside a namespace.

Used as OpenSSH's ``ProxyCommand`` so that ``ssh`` and Ansible, running in the root namespace, reach the
lab nodes on the bridge inside the lab's namespace (host keys are still checked end to end by ssh).
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import time

from rackctl_lab.netns import socket_in

#: How long the relay still passes the node's bytes to ssh once ssh closed its side: a node that is gone (its VM
#: destroyed, the namespace deleted) never closes the connection, and the relay must not outlive ssh for that.
LINGER_S = 10.0


def relay(netns: str, host: str, port: int) -> int:
    sock = socket_in(netns)
    sock.settimeout(15)
    sock.connect((host, port))
    sock.settimeout(None)
    with sock:
        return pump(sock, sys.stdin.fileno(), sys.stdout.fileno())


def pump(sock: socket.socket, stdin: int, stdout: int, linger_s: float = LINGER_S) -> int:
    """Copy ``stdin`` to ``sock`` and ``sock`` to ``stdout`` until the node closes, or ``linger_s`` after
    ``stdin`` closed (ssh is done)."""
    sel = selectors.DefaultSelector()
    sel.register(stdin, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    deadline: float | None = None
    while True:
        events = sel.select(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if not events and deadline is not None:
            return 0  # ssh closed its side and the node never answered the close
        for key, _ in events:
            if key.fileobj == stdin:
                data = os.read(stdin, 65536)
                if not data:
                    sel.unregister(stdin)
                    sock.shutdown(socket.SHUT_WR)
                    deadline = time.monotonic() + linger_s
                    continue
                sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    return 0
                os.write(stdout, data)


def proxy_command(netns: str) -> str:
    """The ``ProxyCommand`` value for ssh (``%h``/``%p`` filled in by ssh)."""
    return f"{sys.executable} -m rackctl_lab.nsrelay {netns} %h %p"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m rackctl_lab.nsrelay NETNS HOST PORT", file=sys.stderr)
        return 2
    try:
        return relay(args[0], args[1], int(args[2]))
    except OSError as exc:
        print(f"nsrelay: {args[1]}:{args[2]} in {args[0]}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
