"""Resolve BMC credentials from environment variables or 0600 files. Passwords stay SecretStr.

Each resolved password is registered with ``redfish_tools.secrets`` (the one redaction mechanism), so it
is masked in the journal, progress lines, errors shown by the CLI and log records. Reading the source is
an environment check (``bootstrap.inventory.environment_checks``): a missing env var or file raises
``OperatorEnvironmentError`` (exit 2) naming the field, the variable or path, and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretStr

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.environment_checks import read_password
from bootstrap.inventory.models import Inventory, Node
from redfish_tools.secrets import install_log_redaction, register_secret


@dataclass(frozen=True)
class Credentials:
    """A username and a password that never prints."""

    username: str
    password: SecretStr

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=**********)"


def resolve_credentials(inventory: Inventory, name: str) -> Credentials:
    """The credentials named ``name`` under ``credentials:``; the password is registered for redaction."""
    password = read_password(inventory, name)
    install_log_redaction()
    register_secret(password)
    return Credentials(inventory.credentials[name].username, SecretStr(password))


def resolve_bmc_credentials(inventory: Inventory, node: Node) -> Credentials:
    """The effective BMC credentials of ``node`` (node > model group > role group > defaults)."""
    settings = inventory.bmc_settings(node)
    if settings.credentials is None:
        raise InvalidInput(
            f"no BMC credentials for {node.hostname}",
            problems=[Problem(f"nodes.{node.hostname}.bmc.credentials", "not set", "set bmc.defaults.credentials")],
        )
    return resolve_credentials(inventory, settings.credentials)
