"""Typed Redfish errors: each names the BMC, the URI, the HTTP status and the Redfish MessageId.

The out-of-band layer depends on nothing in ``bootstrap``: :class:`RedfishError` is its own base; the CLI
catches it beside its own errors and prints it as a message (exit 1). Secrets never reach these objects:
callers pass URIs and Redfish messages only.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ErrorContext(TypedDict):
    """Where and how a Redfish call failed: the keyword arguments of :class:`RedfishError`."""

    bmc: str
    uri: str
    status: int | None
    message_id: str | None
    extended_info: list[dict[str, Any]]


class RedfishError(Exception):
    """A Redfish call to one BMC failed (``message`` is the full text, ``reason`` the cause alone)."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        bmc: str = "",
        uri: str = "",
        status: int | None = None,
        message_id: str | None = None,
        extended_info: list[dict[str, Any]] | None = None,
    ) -> None:
        self.bmc = bmc
        self.uri = uri
        self.status = status
        self.message_id = message_id
        self.extended_info = list(extended_info or [])
        self.message = self._compose(message)
        self.problems: list[Any] = []
        super().__init__(self.message)
        self.reason = message

    def _compose(self, message: str) -> str:
        where = " ".join(p for p in (self.bmc, self.uri) if p)
        bits = [f"HTTP {self.status}" if self.status is not None else "", self.message_id or ""]
        detail = ", ".join(b for b in bits if b)
        head = f"{where}: " if where else ""
        return f"{head}{message}" + (f" ({detail})" if detail else "")

    @property
    def kind(self) -> str:
        """Short machine-readable cause, e.g. ``auth``, ``timeout``, ``session_limit``."""
        return _KINDS.get(type(self), "redfish")

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly view for ``--json`` output and the journal."""
        return {
            "kind": self.kind,
            "message": self.reason,
            "bmc": self.bmc,
            "uri": self.uri,
            "status": self.status,
            "message_id": self.message_id,
            "extended_info": [
                {k: v for k, v in item.items() if k in ("MessageId", "Message", "Resolution", "Severity")}
                for item in self.extended_info
            ],
        }


class AuthError(RedfishError):
    """The BMC rejected the credentials (HTTP 401)."""


class PermissionDeniedError(RedfishError):
    """The account may not do this (HTTP 403): reported, never answered by logging in again."""


class SessionLimitError(RedfishError):
    """The BMC has no free session (iDRAC ``RAC0218``)."""


class NotReadyError(RedfishError):
    """The iDRAC said it is not ready (``SWC0700``) or busy (503) after every retry."""


class TransportError(RedfishError):
    """The BMC could not be reached (connection refused, reset, DNS)."""


class RedfishTimeout(TransportError):
    """The BMC did not answer within the connect or read timeout."""


class DeadlineExceeded(RedfishTimeout):
    """The operation ran past its total deadline (``ConnectionPolicy.deadline_s``/``request_deadline_s``),
    whatever the per-read timeouts (a BMC trickling bytes, retries, backoff)."""


class AnswerLost(TransportError):
    """A request that is not safe to repeat (a POST action) was sent but its answer never came (connection
    dropped or timed out): the BMC may have acted, so it was not sent again."""


class TLSError(TransportError):
    """Certificate verification failed; ``problem`` says why (``unknown_ca``, ``expired``, ``name_mismatch``,
    ``self_signed``, ``fingerprint_mismatch``, ``not_yet_valid``, ``handshake``), the message what to fix."""

    def __init__(self, message: str, *, problem: str = "handshake", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.problem = problem

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "tls_problem": self.problem}


class NotFoundError(RedfishError):
    """A resource, link or action the operation needs does not exist on this BMC."""


class InvalidRequestError(RedfishError):
    """The BMC refused the request as invalid (HTTP 400/405/409…)."""


class JobFailedError(RedfishError):
    """A configuration job or task ended Failed/CompletedWithErrors, or did not finish in time."""


class ValidationError(RedfishError):
    """A requested setting is not valid for this BMC (e.g. against its BIOS registry)."""


class OperationNotConfirmed(RedfishError):
    """The BMC accepted the change but reading back does not show it."""


class Cancelled(RedfishError):
    """The run was interrupted (Ctrl-C): this request was not sent (``sent`` False) or was cut mid-way."""

    exit_code = 130

    def __init__(self, message: str, *, sent: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.sent = sent


_KINDS: dict[type, str] = {
    Cancelled: "cancelled",
    AuthError: "auth",
    PermissionDeniedError: "permission",
    DeadlineExceeded: "deadline",
    SessionLimitError: "session_limit",
    NotReadyError: "not_ready",
    TransportError: "transport",
    RedfishTimeout: "timeout",
    TLSError: "tls",
    AnswerLost: "answer_lost",
    NotFoundError: "not_found",
    InvalidRequestError: "invalid_request",
    JobFailedError: "job_failed",
    ValidationError: "validation",
    OperationNotConfirmed: "not_confirmed",
}


def extended_info_of(body: Any) -> list[dict[str, Any]]:
    """Return ``@Message.ExtendedInfo`` from a Redfish error or response body (empty if none)."""
    if not isinstance(body, dict):
        return []
    err = body.get("error")
    source = err if isinstance(err, dict) else body
    info = source.get("@Message.ExtendedInfo") or []
    return [i for i in info if isinstance(i, dict)]


def message_id_of(body: Any) -> str | None:
    """Return the most specific MessageId in a body, without its registry prefix (``Base.1.12.``)."""
    for item in extended_info_of(body):
        mid = item.get("MessageId")
        if mid:
            return str(mid).rsplit(".", 1)[-1]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        if code:
            return str(code).rsplit(".", 1)[-1]
    return None
