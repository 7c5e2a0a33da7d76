"""TLS policy for BMC connections: a CA bundle, a pinned leaf fingerprint, or (explicitly) none."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests.certs

from redfish_tools.deadline import DeadlineAdapter

_FP_RE = re.compile(r"^[0-9A-Fa-f]{2}(:?[0-9A-Fa-f]{2}){31}$")


def normalise_fingerprint(value: str) -> str:
    """Return a SHA-256 fingerprint as lower-case hex without colons; raise ``ValueError`` if malformed."""
    text = value.strip()
    if text.lower().startswith("sha256:"):
        text = text[7:]
    if not _FP_RE.match(text):
        raise ValueError(
            f"{value!r} is not a SHA-256 certificate fingerprint (64 hex digits, optionally colon-separated)"
        )
    return text.replace(":", "").lower()


class PinnedFingerprintAdapter(DeadlineAdapter):
    """A requests adapter whose connections accept only a leaf certificate with this SHA-256 fingerprint.

    urllib3 checks ``assert_fingerprint`` on the peer's certificate after the handshake; the CA chain and the
    host name are not consulted (pinning replaces them, as for a self-signed iDRAC certificate).
    """

    def __init__(self, fingerprint: str, **kwargs: Any) -> None:
        self._fingerprint = normalise_fingerprint(fingerprint)
        super().__init__(**kwargs)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        pool_kwargs["assert_fingerprint"] = self._fingerprint
        super().init_poolmanager(connections, maxsize, block=block, **pool_kwargs)


@dataclass(frozen=True)
class TlsPolicy:
    """How to verify one BMC's certificate. Verified by default (system CA store)."""

    ca_file: Path | None = None
    fingerprint: str | None = None
    insecure: bool = False

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redfish.redfish_client`` implementing this policy."""
        if self.fingerprint:
            # verify=False lets the adapter's fingerprint check replace chain validation.
            return {"cafile": None, "https_adapter": PinnedFingerprintAdapter(self.fingerprint)}
        adapter = DeadlineAdapter()
        if self.insecure:
            return {"cafile": None, "https_adapter": adapter}
        return {"cafile": str(self.ca_file) if self.ca_file else requests.certs.where(), "https_adapter": adapter}

    def describe(self) -> str:
        """One word for status output: pinned, ca, system or insecure."""
        if self.fingerprint:
            return "pinned"
        if self.insecure:
            return "insecure"
        return "ca" if self.ca_file else "system"
