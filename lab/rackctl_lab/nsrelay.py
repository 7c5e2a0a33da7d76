"""``python -m rackctl_lab.nsrelay NETNS HOST PORT``: relay stdin/stdout to a TCP port inside a namespace.

Used as OpenSSH's ``ProxyCommand`` so that ``ssh`` and Ansible, running in the root namespace, reach the
lab nodes on the bridge inside the lab's namespace (host keys are still checked end to end by ssh).
"""

from __future__ import annotations

import os
import selectors
import sys

from rackctl_lab.netns import socket_in


def relay(netns: str, host: str, port: int) -> int:
    sock = socket_in(netns)
    sock.settimeout(15)
    sock.connect((host, port))
    sock.settimeout(None)
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(stdin, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == stdin:
                data = os.read(stdin, 65536)
                if not data:
                    sel.unregister(stdin)
                    sock.shutdown(1)
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
