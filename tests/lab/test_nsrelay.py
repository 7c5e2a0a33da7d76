"""The ProxyCommand relay between ssh and a lab node (real sockets and pipes; no namespace needed for the pump)."""

from __future__ import annotations

import os
import socket
import threading

from rackctl_lab.nsrelay import pump


def _run_pump(sock: socket.socket, stdin: int, stdout: int, linger_s: float) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(pump(sock, stdin, stdout, linger_s)), daemon=True)
    thread.start()
    return thread, result


def test_relays_both_ways_and_ends_when_the_node_closes() -> None:
    node, relay_end = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    thread, result = _run_pump(relay_end, stdin_r, stdout_w, linger_s=30)
    os.write(stdin_w, b"SSH-2.0-client\r\n")
    assert node.recv(100) == b"SSH-2.0-client\r\n"
    node.sendall(b"SSH-2.0-node\r\n")
    assert os.read(stdout_r, 100) == b"SSH-2.0-node\r\n"
    node.close()
    thread.join(5)
    assert not thread.is_alive() and result == [0]
    for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
        os.close(fd)


def test_ends_after_ssh_closed_even_when_the_node_never_closes() -> None:
    """A node whose VM and namespace are gone never answers the close: the relay must not outlive ssh."""
    node, relay_end = socket.socketpair()  # ``node`` stays open and silent: the vanished peer
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    thread, result = _run_pump(relay_end, stdin_r, stdout_w, linger_s=0.5)
    os.close(stdin_w)  # ssh exits
    thread.join(10)
    assert not thread.is_alive() and result == [0]
    assert node.recv(10) == b""  # the relay half-closed its side for the node
    node.close()
    for fd in (stdin_r, stdout_r, stdout_w):
        os.close(fd)
