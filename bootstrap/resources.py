"""Where the files rackctl ships beside its code are: playbooks, roles, sample inventories, ansible.cfg.

They live at the top of the repository, where users of Ansible projects expect them (``playbooks/``,
``roles/``, ``inventory/examples/``, ``ansible.cfg``). ``bootstrap/_share`` links to them, so a checkout
and an installed wheel (which carries real copies under ``bootstrap/_share``) find them the same way.
"""

from __future__ import annotations

from pathlib import Path

SHARE = Path(__file__).resolve().parent / "_share"


def playbooks_dir() -> Path:
    """The shipped playbooks (``site.yml`` and one per stage)."""
    return SHARE / "playbooks"


def roles_dir() -> Path:
    """The shipped roles."""
    return SHARE / "roles"


def examples_dir() -> Path:
    """The shipped sample inventories (``rackctl init --example NAME``) and sizing requirements."""
    return SHARE / "examples"


def sizing_examples() -> dict[str, Path]:
    """The shipped sizing requirements files by name (``rackctl size --example NAME``)."""
    return {file.stem: file for file in sorted((examples_dir() / "sizing").glob("*.yaml"))}


def ansible_config() -> Path:
    """The ``ansible.cfg`` every playbook run uses."""
    return SHARE / "ansible.cfg"
