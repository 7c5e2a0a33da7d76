"""Resolve BMC credentials from environment variables or 0600 files. Passwords stay SecretStr."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import yaml
from pydantic import SecretStr

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory, Node


@dataclass(frozen=True)
class Credentials:
    """A username and a password that never prints."""

    username: str
    password: SecretStr

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=**********)"


def resolve_credentials(inventory: Inventory, name: str) -> Credentials:
    """The credentials named ``name`` under ``credentials:``."""
    path = f"credentials.{name}"
    cred = inventory.credentials.get(name)
    if cred is None:
        raise InvalidInput(f"credentials {name!r} are not defined", problems=[Problem(path, "not defined")])
    if cred.password_env is not None:
        value = os.environ.get(cred.password_env)
        if not value:
            raise InvalidInput(
                f"BMC password for {name!r} is not available",
                problems=[
                    Problem(
                        f"{path}.password_env",
                        f"environment variable {cred.password_env} is not set",
                        f"export {cred.password_env}=...",
                    )
                ],
            )
        return Credentials(cred.username, SecretStr(value))
    assert cred.password_file is not None
    return Credentials(cred.username, SecretStr(_read_password_file(inventory, name, path)))


def _read_password_file(inventory: Inventory, name: str, path: str) -> str:
    assert inventory.credentials[name].password_file is not None
    file = inventory.resolve_path(inventory.credentials[name].password_file)  # type: ignore[arg-type]
    try:
        mode = stat.S_IMODE(file.stat().st_mode)
        text = file.read_text(encoding="utf-8")
    except OSError:
        raise InvalidInput(
            f"cannot read the password file of {name!r}",
            problems=[Problem(f"{path}.password_file", f"{file} is missing or unreadable", "create it, mode 0600")],
        ) from None
    if mode & 0o077:
        raise InvalidInput(
            f"password file of {name!r} is readable by others",
            problems=[Problem(f"{path}.password_file", f"mode {mode:04o}", f"chmod 600 {file}")],
        )
    stripped = text.strip()
    try:
        data = yaml.safe_load(stripped)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise InvalidInput(
                f"password file of {name!r} has no entry for it",
                problems=[Problem(f"{path}.password_file", f"no key {name!r} in {file}", f"add `{name}: <password>`")],
            )
        return value
    if not stripped:
        raise InvalidInput(
            f"password file of {name!r} is empty",
            problems=[Problem(f"{path}.password_file", f"{file} is empty", "write the password into it")],
        )
    return stripped


def resolve_bmc_credentials(inventory: Inventory, node: Node) -> Credentials:
    """The effective BMC credentials of ``node`` (node > model group > role group > defaults)."""
    settings = inventory.bmc_settings(node)
    if settings.credentials is None:
        raise InvalidInput(
            f"no BMC credentials for {node.hostname}",
            problems=[Problem(f"nodes.{node.hostname}.bmc.credentials", "not set", "set bmc.defaults.credentials")],
        )
    return resolve_credentials(inventory, settings.credentials)
