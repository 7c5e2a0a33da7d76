"""Say so when BMCs are reached without TLS verification (``insecure: true`` or ``--insecure``).

Every command that talks to BMCs this way reports it once per run: a stderr warning, a ``warnings`` entry
in the ``--json`` document and, for journalled runs, a note on the run in the journal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SHOWN = 10


def unverified_bmcs(inventory: Any, hostnames: Iterable[str], *, forced: bool = False) -> list[str]:
    """The hostnames among ``hostnames`` whose BMC certificate will not be verified."""
    names = list(hostnames)
    if forced:
        return names
    settings_of = getattr(inventory, "bmc_settings", None)
    if settings_of is None:  # a stand-in inventory without BMC settings (runner tests)
        return []
    nodes = {node.hostname: node for node in inventory.nodes}
    return [name for name in names if name in nodes and settings_of(nodes[name]).insecure]


def insecure_warning(inventory: Any, hostnames: Iterable[str], *, forced: bool = False) -> str | None:
    """One sentence naming the BMCs reached without TLS verification, or None when all are verified."""
    names = unverified_bmcs(inventory, hostnames, forced=forced)
    if not names:
        return None
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    why = "--insecure" if forced else "insecure: true in the inventory"
    return (
        f"TLS verification is off for the BMC(s) of {shown} ({why}): their identity is not checked and "
        "the BMC password goes to whoever answers; set ca_file or fingerprint for production"
    )
