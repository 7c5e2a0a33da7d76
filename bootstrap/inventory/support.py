"""Upstream support windows: which Kubernetes minors and GPU Operator lines are past their end of life.

An inventory may pin such a release (the file stays valid); ``validate``, ``plan`` and ``up`` then warn, naming
the field. Dates and statuses were read from the upstream pages on 2026-11-27 (docs/kubernetes.md, "Versions:
what was checked upstream"); a release newer than the tables is taken as supported.
"""

from __future__ import annotations

from datetime import date

from bootstrap.inventory.profiles import operator_line, version_tuple

#: Kubernetes minor -> its end-of-life date, from https://kubernetes.io/releases/<minor>/ ("End Of Life
#: Date"; 1.33 and 1.34 also in the releases history). A minor older than the first row ended before it.
KUBERNETES_EOL: dict[str, date] = {
    "1.33": date(2026, 6, 28),
    "1.34": date(2026, 10, 27),
    "1.35": date(2027, 2, 28),
    "1.36": date(2027, 6, 28),
    "1.37": date(2027, 10, 28),
}

#: GPU Operator lines NVIDIA still patches ("NVIDIA GPU Operator Life Cycle" of its platform-support page:
#: 26.7.x supported, 26.3.x deprecated with critical fixes only, 25.10.x and lower end of support). A line
#: older than every row is past support; a newer one is taken as supported.
OPERATOR_SUPPORTED: dict[str, str] = {"v26.3": "deprecated (critical fixes only)", "v26.7": "supported"}


def _minor(version: str) -> str:
    return ".".join(str(p) for p in version_tuple(version)[:2])


def kubernetes_eol(version: str, today: date) -> str | None:
    """Why Kubernetes ``version`` (x.y.z) is past its end of life on ``today``; None while it is supported."""
    minor = _minor(version)
    first = min(KUBERNETES_EOL, key=version_tuple)
    if minor in KUBERNETES_EOL:
        ended = KUBERNETES_EOL[minor]
        return f"Kubernetes {minor} reached its end of life on {ended.isoformat()}" if ended <= today else None
    if version_tuple(minor) < version_tuple(first):
        return f"Kubernetes {minor} reached its end of life before {KUBERNETES_EOL[first].isoformat()}"
    return None


def supported_kubernetes(today: date) -> list[str]:
    """The minors still supported on ``today`` (for the fix of a warning)."""
    return [minor for minor, ended in KUBERNETES_EOL.items() if ended > today]


def operator_past_support(chart: str) -> str | None:
    """Why GPU Operator chart ``chart`` is past NVIDIA's support; None while its line is patched."""
    if len(version_tuple(chart)) < 2:  # not a release number: nothing to compare
        return None
    line = operator_line(chart)
    oldest = min(OPERATOR_SUPPORTED, key=version_tuple)
    if line in OPERATOR_SUPPORTED or version_tuple(line) > version_tuple(oldest):
        return None
    return f"GPU Operator {line}.x is past NVIDIA's support (only {', '.join(OPERATOR_SUPPORTED)} get patches)"
