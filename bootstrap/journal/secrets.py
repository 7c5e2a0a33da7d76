"""Keep secrets out of the journal: refuse secret-looking data; free text goes through the one redaction.

Storing is refused by key name (:data:`SECRET_WORDS`, :data:`SECRET_PAIRS`: the one word list, also used by
``bootstrap.ansible_driver`` for extravars) and by value type (``SecretStr``, PEM private keys). Masking
free text is not done here: ``redfish_tools.secrets.redact`` is the one redaction; it masks the
registered secret values and credential-shaped strings, never key names.
"""

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
SECRET_PAIRS = frozenset({("private", "key"), ("api", "key"), ("access", "key"), ("secret", "key"), ("auth", "key")})
#: The same list as substrings of a lower-case key (``bmc_password``, ``ssh_private_key``), for checks
#: that match by substring (``bootstrap.ansible_driver``'s extravars refusal).
SECRET_KEYS: tuple[str, ...] = tuple(sorted(SECRET_WORDS)) + tuple(sorted("_".join(p) for p in SECRET_PAIRS))
_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


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
