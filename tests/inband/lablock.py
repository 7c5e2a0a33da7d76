"""The machine-wide lab lock (``/tmp/rackctl-lab.lock``): one VM lab at a time on this machine.

The lab uses fixed namespace, bridge and BMC port names, so every test that starts VMs takes this lock.
:func:`lab_lock` takes it unless this process or one of its ancestors already holds it (a run wrapped in
``flock /tmp/rackctl-lab.lock pytest ...``), which would otherwise wait on itself forever.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK = Path("/tmp/rackctl-lab.lock")


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def held_by_ancestor(path: Path = LOCK) -> bool:
    """True when a ``flock`` on ``path`` is held by this process or one of its ancestors (``/proc/locks``)."""
    try:
        inode = path.stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return False
    mine = _ancestors()
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        if int(fields[5].rsplit(":", 1)[1]) == inode and int(fields[4]) in mine:
            return True
    return False


@contextlib.contextmanager
def lab_lock(path: Path = LOCK) -> Iterator[None]:
    """Hold the lab lock for the block (waits for other engineers' lab runs to finish)."""
    if held_by_ancestor(path):
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
