"""The on-disk ledger of Redfish sessions this host opened and has not closed yet.

An iDRAC allows 8 sessions. A process killed with SIGKILL (or a power loss) cannot log out, and its sessions
stay open until the BMC's ``SessionTimeout``: a few such runs lock operators out. So every session login
records ``{url, session uri, user name, pid}`` (never the token) in ``<ledger>/<bmc-key>/<entry>.json``,
written atomically right after login and removed after a successful logout. The next login to that BMC (or
:func:`close_stale_sessions`) deletes, with basic auth, the sessions whose process is gone (a 404 means the
BMC already dropped them) and removes their entries. Entries of a live process (another run, or this one)
are left alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("redfish_tools")


@dataclass(frozen=True)
class LedgerEntry:
    """One open session as recorded: where its file is, its URI, user name and the process that opened it."""

    path: Path
    uri: str
    username: str
    pid: int


def _bmc_dir(ledger: Path, url: str) -> Path:
    return ledger / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]


def _entry_file(ledger: Path, url: str, uri: str) -> Path:
    return _bmc_dir(ledger, url) / (hashlib.sha256(uri.encode()).hexdigest()[:24] + ".json")


def record(ledger: Path, url: str, uri: str, username: str) -> None:
    """Record an open session (atomically: a temporary file renamed into place)."""
    path = _entry_file(ledger, url, uri)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {"url": url, "uri": uri, "username": username, "pid": os.getpid()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def forget(ledger: Path, url: str, uri: str) -> None:
    """Remove a session's entry (after it was deleted on the BMC)."""
    _entry_file(ledger, url, uri).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def stale_entries(ledger: Path, url: str) -> list[LedgerEntry]:
    """The entries for this BMC whose process is gone (unreadable entries are dropped)."""
    found = []
    directory = _bmc_dir(ledger, url)
    if not directory.is_dir():
        return []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entry = LedgerEntry(path, str(data["uri"]), str(data["username"]), int(data["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("dropping an unreadable session ledger entry %s", path)
            path.unlink(missing_ok=True)
            continue
        if not _alive(entry.pid):
            found.append(entry)
    return found
