"""Keep secrets out of the journal: find secret-looking keys and values, redact free text."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from pydantic import SecretBytes, SecretStr

from bootstrap.errors import RackctlError

#: Single words that name a secret when they are a whole word of a key (``bmc_password``, ``authToken``).
SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "pwd", "secret", "token", "credential", "credentials", "bearer"}
)
#: Word pairs that name key material (``private_key``, ``apiKey``).
SECRET_PAIRS = frozenset(
    {("private", "key"), ("api", "key"), ("access", "key"), ("secret", "key"), ("auth", "key")}
)
_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_URL_USERINFO_RE = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@", re.I)
_ASSIGNMENT_RE = re.compile(
    r"(?P<key>\b[\w-]*(?:password|passwd|passphrase|secret|token)[\w-]*\b\s*[=:]\s*)(?P<val>[^\s,;&'\"]+)",
    re.I,
)
REDACTED = "***"


class SecretRefused(RackctlError):
    """Something that looks like a secret was about to be written to the journal."""


def key_words(key: str) -> list[str]:
    """Split a key into lower-case words: ``bmcPassword`` -> ``['bmc', 'password']``."""
    return [w.lower() for w in _WORD_RE.findall(key)]


def looks_like_secret_key(key: str) -> bool:
    """True when a key names a secret (password, token, secret, private/api key...)."""
    words = key_words(key)
    if any(w in SECRET_WORDS for w in words):
        return True
    return any(pair in SECRET_PAIRS for pair in itertools.pairwise(words))


def _is_secret_value(value: Any) -> bool:
    if isinstance(value, SecretStr | SecretBytes):
        return True
    return isinstance(value, str) and "-----BEGIN" in value and "PRIVATE KEY" in value


def find_secrets(data: Any, path: str = "") -> list[str]:
    """Paths in ``data`` holding a secret: a secret-named key with a non-empty string value, a pydantic
    ``SecretStr``/``SecretBytes`` anywhere, or PEM private key material anywhere."""
    found: list[str] = []
    if _is_secret_value(data):
        return [path or "(value)"]
    if isinstance(data, Mapping):
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            holds_text = isinstance(value, str | bytes) and len(value) > 0
            if looks_like_secret_key(str(key)) and (holds_text or _is_secret_value(value)):
                found.append(sub)
            else:
                found.extend(find_secrets(value, sub))
    elif isinstance(data, list | tuple | set):
        for index, value in enumerate(data):
            found.extend(find_secrets(value, f"{path}[{index}]"))
    return found


def refuse_secrets(data: Any, what: str) -> None:
    """Raise :class:`SecretRefused` naming the offending paths (never the values)."""
    paths = find_secrets(data)
    if paths:
        raise SecretRefused(
            f"refusing to store {what}: {', '.join(paths)} looks like a secret; the journal never holds "
            "secrets (store the name of the credential, not its value)"
        )


def redact_text(text: str) -> str:
    """Mask passwords in URLs (``https://user:pw@host``) and ``password=...``-style assignments."""
    text = _URL_USERINFO_RE.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    return _ASSIGNMENT_RE.sub(lambda m: f"{m['key']}{REDACTED}", text)
