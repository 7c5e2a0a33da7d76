"""Keep BMC passwords and session tokens out of every log record.

Tokens and passwords are registered while in use; a logging filter installed on rackctl's and the DMTF
library's loggers replaces them with ``<redacted>`` in any record (the library logs request headers, including
``X-Auth-Token``, at DEBUG level).
"""

from __future__ import annotations

import logging
import re
import threading

REDACTED = "<redacted>"

#: Credentials recognisable by shape: session token and Authorization headers, JSON password fields.
_PATTERNS = (
    re.compile(r"(?i)(x-auth-token[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:basic|bearer)\s+)[^\s\"',}]+"),
    re.compile(r"(?i)(\"password\"\s*:\s*\")(?:[^\"\\]|\\.)*"),
)

_lock = threading.Lock()
_secrets: dict[str, int] = {}


def register_secret(value: str) -> None:
    """Start redacting ``value`` in log records (reference counted)."""
    if not value or len(value) < 4:
        return
    with _lock:
        _secrets[value] = _secrets.get(value, 0) + 1


def forget_secret(value: str) -> None:
    """Stop redacting ``value`` once every user of it has forgotten it."""
    with _lock:
        count = _secrets.get(value, 0) - 1
        if count <= 0:
            _secrets.pop(value, None)
        else:
            _secrets[value] = count


def redact(text: str) -> str:
    """Return ``text`` with every registered secret and every token/password-shaped value replaced."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    with _lock:
        values = sorted(_secrets, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Logging filter that rewrites a record's message with secrets removed."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = RedactingFilter()


def install_log_redaction(*logger_names: str) -> None:
    """Attach the redacting filter to the named loggers (idempotent)."""
    for name in logger_names or ("redfish", "redfish.rest.v1", "redfish_tools"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
