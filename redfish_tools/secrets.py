"""rackctl's one redaction mechanism: mask the secret *values* in use, wherever text leaves the process.

Passwords and session tokens are registered (:func:`register_secret`) when they are resolved or issued;
:func:`redact` replaces every registered value with ``<redacted>``. Key names are never masked, so
``password_file: /etc/x missing`` or ``export RACKCTL_BMC_PASSWORD=...`` stay readable.

Only credentials that cannot be registered in advance and are recognisable by their shape are masked by
pattern (:data:`SHAPE_PATTERNS`, the one list): URL userinfo passwords, ``X-Auth-Token`` and
``Authorization`` header values, the ``"Password"`` field of a Redfish JSON body, PEM private keys.

:func:`install_log_redaction` routes every log record of the process through :func:`redact` (the DMTF
library logs request headers, including ``X-Auth-Token``, at DEBUG level). ``bootstrap`` uses this module
for the journal, progress, CLI errors and logs; this package never imports ``bootstrap``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

REDACTED = "<redacted>"
#: Shorter values are not registered: masking them would garble ordinary words.
MIN_SECRET_LENGTH = 4

#: Credentials recognisable by shape; group ``keep`` is kept, the rest of the match becomes ``<redacted>``.
SHAPE_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?P<keep>\b[a-z][a-z0-9+.-]*://[^:/@\s]+:)[^@/\s]+(?=@)", re.I),
    re.compile(r"(?i)(?P<keep>x-auth-token[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"(?i)(?P<keep>authorization[\"']?\s*[:=]\s*[\"']?(?:basic|bearer)\s+)[^\s\"',}]+"),
    re.compile(r"(?i)(?P<keep>\"password\"\s*:\s*\")(?:[^\"\\]|\\.)*"),
    re.compile(r"(?P<keep>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"),
)

_lock = threading.Lock()
_secrets: dict[str, int] = {}


def register_secret(value: str) -> None:
    """Start redacting ``value`` everywhere (reference counted; values under 4 characters are ignored)."""
    if not value or len(value) < MIN_SECRET_LENGTH:
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


def _mask_shape(match: re.Match[str]) -> str:
    keep = match.group("keep")
    return keep + (REDACTED if not keep.startswith("-----BEGIN") else f"\n{REDACTED}\n")


def redact(text: str) -> str:
    """``text`` with every registered secret value and every credential-shaped value replaced."""
    if not text:
        return text
    with _lock:
        values = sorted(_secrets, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern in SHAPE_PATTERNS:
        text = pattern.sub(_mask_shape, text)
    return text


class RedactingFilter(logging.Filter):
    """Logging filter that rewrites a record's message with secrets removed."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed record: leave it to the handler
        return
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))


_FILTER = RedactingFilter()


def install_log_redaction(*logger_names: str) -> None:
    """Redact every log record of this process (idempotent).

    A record factory redacts each record as it is created, whatever logger made it (filters on a parent
    logger do not see its children's records); ``logger_names`` also get the filter, for records that
    reach a handler some other way.
    """
    with _lock:
        previous: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()
        if not getattr(previous, "redacts", False):

            def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = previous(*args, **kwargs)
                _redact_record(record)
                return record

            factory.redacts = True  # type: ignore[attr-defined]
            logging.setLogRecordFactory(factory)
    for name in logger_names or ("redfish", "redfish.rest.v1", "redfish_tools"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
