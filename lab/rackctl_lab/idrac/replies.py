"""What an emulated iDRAC's handlers answer: :class:`Reply`, Redfish error and success bodies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_SESSIONS = 8
SESSIONS = "/redfish/v1/SessionService/Sessions"


@dataclass
class Reply:
    """What the server sends back: JSON (dict/list), text, or nothing; or a dropped connection."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    drop: bool = False
    hang_s: float = 0.0


def redfish_error(status: int, message_id: str, message: str, resolution: str = "") -> Reply:
    """A Redfish error body with one extended-info message."""
    info = {"MessageId": message_id, "Message": message, "Severity": "Warning", "Resolution": resolution}
    body = {"error": {"code": "Base.1.12.GeneralError", "message": message, "@Message.ExtendedInfo": [info]}}
    return Reply(status, body)


def success(status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    info = {"MessageId": "Base.1.12.Success", "Message": "Successfully Completed Request", "Severity": "OK"}
    return Reply(status, {"@Message.ExtendedInfo": [info]}, headers or {})
