"""Where the lab keeps its state: defined here once, used by the lab's CLI, its environment and its tests.

The lab directory is ``--state-dir`` of the ``rackctl lab`` commands, else ``$RACKCTL_LAB_DIR``, else
``.lab`` in the current directory. Inside it: the lab CA and BMC passwords the inventory points at
(``pki/``, ``secrets/``), the emulated iDRACs (``idrac/``), the VMs (``vms/``) and the lab admin's SSH key.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "RACKCTL_LAB_DIR"
DEFAULT = Path(".lab")


def lab_dir(explicit: Path | str | None = None) -> Path:
    """The lab directory: ``explicit``, else ``$RACKCTL_LAB_DIR``, else ``./.lab``."""
    if explicit:
        return Path(explicit)
    value = os.environ.get(ENV_VAR)
    return Path(value) if value else DEFAULT


def admin_key(directory: Path) -> Path:
    """The lab admin's SSH private key (its public half is authorised by the lab's images)."""
    return Path(directory) / "ssh" / "id_ed25519"
