"""Power a node on, off (forced or graceful) or cycle it; idempotent and confirmed by reading back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service, allowable, require_action
from redfish_tools.views import ComputerSystem

PowerAction = Literal["on", "off", "graceful-off", "cycle", "graceful-restart"]
POWER_ACTIONS: tuple[str, ...] = ("on", "off", "graceful-off", "cycle", "graceful-restart")

#: action -> (Redfish ResetType preferences, state wanted afterwards)
_RESET: dict[str, tuple[tuple[str, ...], str]] = {
    "on": (("On",), "On"),
    "off": (("ForceOff",), "Off"),
    "graceful-off": (("GracefulShutdown",), "Off"),
    "cycle": (("ForceRestart", "PowerCycle"), "On"),
    "graceful-restart": (("GracefulRestart", "ForceRestart"), "On"),
}


@dataclass
class PowerResult:
    """What a power request did: ``changed`` is False when the node already was in the asked state."""

    action: str
    before: str | None
    after: str | None
    changed: bool
    reset_type: str | None = None

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def power_state(conn: BmcConnection, svc: Service | None = None) -> str | None:
    """The system's current ``PowerState`` (fresh read)."""
    svc = svc or Service(conn)
    return ComputerSystem.from_json(svc.system(fresh=True)).power_state


def plan_power(current: str | None, action: str) -> str | None:
    """The ResetType family needed to go from ``current`` to ``action`` (None: nothing to do).

    ``cycle``/``graceful-restart`` of a node that is off means powering it on.
    """
    if action not in _RESET:
        raise E.ValidationError(f"unknown power action {action!r}; use one of {', '.join(POWER_ACTIONS)}")
    wanted = _RESET[action][1]
    if action in ("on", "off", "graceful-off"):
        return None if current == wanted else action
    return "on" if current == "Off" else action


def set_power(
    conn: BmcConnection,
    action: str,
    *,
    wait: bool = True,
    timeout: float = 300.0,
    poll: float = 0.5,
) -> PowerResult:
    """Bring the node to the state ``action`` asks for, doing nothing if it is there already."""
    svc = Service(conn)
    system_uri = svc.system_uri()
    system = svc.get(system_uri, fresh=True)
    before = ComputerSystem.from_json(system).power_state
    step = plan_power(before, action)
    if step is None:
        return PowerResult(action, before, before, changed=False)
    target = require_action(svc, system, "ComputerSystem.Reset", system_uri)
    allowed = allowable(system, "ComputerSystem.Reset", "ResetType")
    prefs, wanted = _RESET[step]
    reset_type = next((p for p in prefs if not allowed or p in allowed), None)
    if reset_type is None:
        raise E.ValidationError(
            f"the BMC allows no reset type for {step!r} (allowed: {', '.join(allowed)})",
            bmc=conn.target.name,
            uri=target,
        )
    conn.post(target, {"ResetType": reset_type})
    after = before
    if wait:
        after = _wait_state(conn, svc=svc, system_uri=system_uri, wanted=wanted, timeout=timeout, poll=poll)
    return PowerResult(action, before, after, changed=True, reset_type=reset_type)


def _wait_state(
    conn: BmcConnection,
    *,
    svc: Service,
    system_uri: str,
    wanted: str,
    timeout: float,
    poll: float,
) -> str:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        try:
            state = ComputerSystem.from_json(svc.get(system_uri, fresh=True)).power_state
        except (E.TransportError, E.NotReadyError):
            if svc.conn.deadline_passed:
                raise
            state = None
        if state == wanted:
            return state
        time.sleep(poll)
    raise E.OperationNotConfirmed(
        f"power state is {state!r}, expected {wanted!r} after {timeout:.0f}s",
        bmc=conn.target.name,
        uri=system_uri,
    )
