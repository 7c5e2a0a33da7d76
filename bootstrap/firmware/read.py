"""Reading each node's installed firmware over Redfish, all BMCs at once.

An iDRAC in the middle of its own reset (an update an earlier, killed run started) drops connections
for a while: a node whose read failed that way is read again, until ``settle_s`` has passed, before it
is reported unreadable.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from bootstrap.firmware.components import installed_versions
from redfish_tools.connection import BmcConnection, BmcTarget, ConnectionPolicy
from redfish_tools.firmware import firmware_inventory
from redfish_tools.fleet import run_fleet

#: Failures that a resetting or busy iDRAC gives, worth another read.
TRANSIENT = ("transport", "timeout", "not_ready", "answer_lost", "session_limit")


def _read(conn: BmcConnection) -> dict[str, list[str]]:
    return installed_versions(firmware_inventory(conn))


def read_installed(
    targets: Sequence[BmcTarget],
    policy: ConnectionPolicy | None = None,
    *,
    settle_s: float = 300.0,
    pause_s: float = 5.0,
) -> tuple[dict[str, dict[str, list[str]]], dict[str, str]]:
    """(node -> component -> installed versions, node -> why it could not be read)."""
    installed: dict[str, dict[str, list[str]]] = {}
    errors: dict[str, str] = {}
    deadline = time.monotonic() + settle_s
    todo = list(targets)
    while todo:
        again = []
        for target, result in zip(todo, run_fleet(todo, _read, policy=policy), strict=True):
            if result.ok and result.value is not None:
                installed[result.name] = result.value
                errors.pop(result.name, None)
                continue
            error = result.error or {}
            errors[result.name] = str(error.get("message") or "unreadable")
            if error.get("kind") in TRANSIENT:
                again.append(target)
        if not again or time.monotonic() + pause_s > deadline:
            break
        time.sleep(pause_s)
        todo = again
    return installed, errors
