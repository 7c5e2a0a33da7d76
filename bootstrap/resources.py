"""Where rackctl's own files live: the Ansible playbooks, roles and config it ships.

The single lookup for them; today the repository's ``playbooks/``, ``roles/`` and ``ansible.cfg``
(when they become package data, only this module changes).
"""

from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def playbooks_dir() -> Path:
    """The directory of the playbooks rackctl runs (``<name>.yml``)."""
    return _ROOT / "playbooks"


def roles_dir() -> Path:
    """The directory of the roles those playbooks use."""
    return _ROOT / "roles"


def ansible_config() -> Path:
    """The ``ansible.cfg`` every playbook run uses."""
    return _ROOT / "ansible.cfg"
