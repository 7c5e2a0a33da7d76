"""TLS policy for BMC connections: a CA bundle, a pinned leaf fingerprint, or (explicitly) none; and why a
handshake failed (:func:`explain_failure`), in words that say what to fix."""

from __future__ import annotations

import re
import ssl
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


#: OpenSSL verify codes (``X509_V_ERR_*``) -> the failure they mean.
_VERIFY_CODES = {
    2: "unknown_ca",  # unable to get issuer certificate
    9: "not_yet_valid",
    10: "expired",
    18: "self_signed",  # depth zero self-signed certificate
    19: "unknown_ca",  # self-signed certificate in chain: the BMC sent its chain, whose root is not trusted
    20: "unknown_ca",  # unable to get local issuer certificate
    21: "unknown_ca",  # unable to verify the first certificate
    62: "name_mismatch",  # hostname mismatch
    64: "name_mismatch",  # IP address mismatch
}


@dataclass(frozen=True)
class TlsFailure:
    """Why a TLS handshake with a BMC failed: ``problem`` (a short code), ``message`` and ``fix``."""

    problem: str
    message: str
    fix: str

    def text(self) -> str:
        return f"TLS: {self.message}; fix: {self.fix}"


def _chain(exc: BaseException | None) -> list[BaseException]:
    """The exception, its causes, contexts and wrapped exceptions (urllib3 and requests nest them)."""
    seen: list[BaseException] = []
    todo = [exc] if exc is not None else []
    while todo and len(seen) < 32:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        nested = [a for a in current.args if isinstance(a, BaseException)]
        reason = getattr(current, "reason", None)
        todo += [e for e in (current.__cause__, current.__context__, reason, *nested) if isinstance(e, BaseException)]
    return seen


def explain_failure(exc: BaseException | None, *, host: str, policy: TlsPolicy) -> TlsFailure:
    """Turn a TLS error from requests/urllib3/ssl into what went wrong and what to fix.

    ``host`` is the address the BMC was reached at; ``policy`` the verification asked for. The text holds
    no secret (certificates and fingerprints are public; the pinned value is not repeated).
    """
    trusted = f"the CA bundle {policy.ca_file}" if policy.ca_file else "the system CA store"
    chain = _chain(exc)
    text = " ".join(str(e) for e in chain)
    if "ingerprints did not match" in text or "ingerprint" in text:
        return TlsFailure(
            "fingerprint_mismatch",
            "the BMC's certificate does not match the pinned fingerprint (bmc.fingerprint)",
            "if the iDRAC's certificate was replaced on purpose, pin the new one "
            "(openssl s_client -connect HOST:443 | openssl x509 -noout -fingerprint -sha256); "
            "otherwise another machine answers at this address",
        )
    code = next((e.verify_code for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
    problem = _VERIFY_CODES.get(code) if code is not None else None
    if problem is None:
        problem = next((p for p, words in _WORDS if any(w in text for w in words)), None)
    if problem == "expired":
        return TlsFailure(
            "expired",
            "the BMC's certificate has expired",
            "renew the iDRAC's certificate (or correct this machine's clock if it is wrong)",
        )
    if problem == "not_yet_valid":
        return TlsFailure(
            "not_yet_valid",
            "the BMC's certificate is not valid yet",
            "check the clocks of this machine and of the iDRAC, or reissue the certificate",
        )
    if problem == "name_mismatch":
        return TlsFailure(
            "name_mismatch",
            f"the BMC's certificate is not valid for {host} (not among its subject alternative names)",
            "address the BMC by a name or IP its certificate lists (bmc.address), or reissue the certificate "
            "with this one",
        )
    if problem == "self_signed":
        return TlsFailure(
            "self_signed",
            f"the BMC presents a self-signed certificate, which {trusted} does not trust",
            "pin its SHA-256 fingerprint (bmc.fingerprint), or install an iDRAC certificate signed by your CA "
            "and set bmc.ca_file",
        )
    if problem == "unknown_ca":
        return TlsFailure(
            "unknown_ca",
            f"the BMC's certificate is signed by a CA that {trusted} does not hold",
            "set bmc.ca_file to the CA bundle that signed the iDRAC's certificate, or pin its fingerprint "
            "(bmc.fingerprint)",
        )
    reason = next((e.reason for e in chain if isinstance(e, ssl.SSLError) and e.reason), None)
    return TlsFailure(
        "handshake",
        f"the TLS handshake failed ({reason or 'no detail'})",
        "check that bmc.address is the iDRAC's HTTPS port and that the iDRAC's TLS settings allow TLS 1.2+",
    )


#: Fallback when no verify code reached us: words of OpenSSL's messages.
_WORDS = (
    ("expired", ("certificate has expired",)),
    ("not_yet_valid", ("certificate is not yet valid",)),
    ("name_mismatch", ("Hostname mismatch", "IP address mismatch", "doesn't match")),
    ("unknown_ca", ("self-signed certificate in certificate chain", "self signed certificate in certificate chain")),
    ("self_signed", ("self-signed certificate", "self signed certificate")),
    ("unknown_ca", ("unable to get local issuer", "unable to get issuer", "unable to verify the first")),
)
