"""Free loopback ports for tests.

Each ``bind(0)`` is given a port that is free at that moment; once its socket is closed the kernel may give
the same port to the next ``bind(0)``. So ports that must differ (a lab's BMCs, etcd's client and peer
ports) are drawn together with :func:`free_ports`, every socket held open until all are drawn.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports, free when drawn."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    """One loopback port, free when drawn."""
    return free_ports(1)[0]
