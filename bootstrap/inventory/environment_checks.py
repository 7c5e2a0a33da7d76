"""Environment checks: what an inventory needs from *this machine*, checked when it is needed.

Validation of the inventory file never depends on this machine: it checks that a credential source and a
way to trust each BMC are *given*. Whether the password environment variable is set, the password file
exists with mode 0600 and holds the entry, and the CA bundle exists and parses is checked here: as errors
by ``preflight`` and by code that reads the credentials at the moment it needs them
(:func:`read_password`); as warnings by ``rackctl validate`` and ``rackctl plan``
(:func:`machine_warnings`), the file staying valid.

A failure is the operator's problem, not a node's: :class:`OperatorEnvironmentError` (exit code 2) names
the field, the value (an env var name, a path, a mode; never a secret) and the fix. The stage runner lets
it end the run without marking any node ``failed`` (see ``bootstrap.stages.runner``).
"""

from __future__ import annotations

import os
import ssl
import stat
from collections.abc import Iterable
from pathlib import Path

import yaml

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory, Node


class OperatorEnvironmentError(InvalidInput):
    """This machine is not ready for the command (env var unset, file missing or too open); exit code 2.

    Raised before any node is touched; it never marks a node ``failed``.
    """


def read_password(inventory: Inventory, name: str) -> str:
    """The password of credentials ``name`` from its env var or file; :class:`OperatorEnvironmentError`."""
    path = f"credentials.{name}"
    cred = inventory.credentials.get(name)
    if cred is None:
        raise InvalidInput(f"credentials {name!r} are not defined", problems=[Problem(path, "not defined")])
    if cred.password_env is not None:
        value = os.environ.get(cred.password_env, "")
        if not value:
            state = "is empty" if cred.password_env in os.environ else "is not set"
            raise OperatorEnvironmentError(
                f"the BMC password of {name!r} is not available",
                problems=[
                    Problem(
                        f"{path}.password_env",
                        f"environment variable {cred.password_env} {state}",
                        f"export {cred.password_env}=<the BMC password> in the shell that runs rackctl",
                    )
                ],
            )
        return value
    assert cred.password_file is not None  # the model requires exactly one source
    return _password_from_file(inventory.resolve_path(cred.password_file), cred.password_file, name, path)


def _password_from_file(file: Path, given: Path, name: str, path: str) -> str:
    where = f"{path}.password_file"
    shown = str(given) if given == file else f"{given} ({file})"
    try:
        mode = stat.S_IMODE(file.stat().st_mode)
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        missing = isinstance(exc, FileNotFoundError)
        raise OperatorEnvironmentError(
            f"cannot read the password file of {name!r}",
            problems=[
                Problem(
                    where,
                    f"{shown} {'does not exist' if missing else f'is unreadable ({exc.strerror})'}",
                    "create it with mode 0600 holding the password or `<name>: <password>` lines "
                    "(for the lab, `rackctl lab up` creates it)",
                )
            ],
        ) from None
    if mode & 0o077:
        raise OperatorEnvironmentError(
            f"the password file of {name!r} is readable by others",
            problems=[Problem(where, f"{shown} has mode {mode:04o}", f"chmod 600 {file}")],
        )
    stripped = text.strip()
    try:
        data = yaml.safe_load(stripped)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise OperatorEnvironmentError(
                f"the password file of {name!r} has no entry for it",
                problems=[Problem(where, f"{shown} has no key {name!r}", f"add `{name}: <password>` to {file}")],
            )
        return value
    if not stripped:
        raise OperatorEnvironmentError(
            f"the password file of {name!r} is empty",
            problems=[Problem(where, f"{shown} is empty", f"write the password into {file}")],
        )
    return stripped


def credential_problems(inventory: Inventory, name: str) -> list[Problem]:
    """Why the password of credentials ``name`` cannot be read on this machine (empty: it can)."""
    try:
        read_password(inventory, name)
    except InvalidInput as exc:
        return exc.problems or [Problem(f"credentials.{name}", exc.message)]
    return []


def ca_bundle_problems(inventory: Inventory, node: Node, *, insecure: bool = False) -> list[Problem]:
    """Why the node's BMC certificate cannot be verified with what is on this machine (empty: it can)."""
    settings = inventory.bmc_settings(node)
    if insecure or settings.insecure or settings.fingerprint is not None or settings.ca_file is None:
        return []  # nothing on this machine is needed (a missing trust setting is a static rule)
    file = inventory.resolve_path(settings.ca_file)
    where = f"nodes.{node.hostname}.bmc.ca_file"
    if not file.is_file():
        return [
            Problem(
                where,
                f"CA bundle {settings.ca_file} does not exist",
                "fix the path or create the bundle (for the lab, `rackctl lab up` creates it)",
            )
        ]
    try:
        ssl.create_default_context(cafile=str(file))
    except (ssl.SSLError, OSError, ValueError) as exc:
        return [Problem(where, f"CA bundle {settings.ca_file} does not parse ({exc})", "use a PEM CA bundle")]
    return []


def environment_problems(inventory: Inventory, nodes: Iterable[Node], *, insecure: bool = False) -> list[Problem]:
    """Every environment problem of the BMC access of ``nodes``, each reported once."""
    problems: dict[str, Problem] = {}
    checked: set[str] = set()
    for node in nodes:
        name = inventory.bmc_settings(node).credentials
        if name is not None and name not in checked:
            checked.add(name)
            for problem in credential_problems(inventory, name):
                problems.setdefault(str(problem), problem)
        for problem in ca_bundle_problems(inventory, node, insecure=insecure):
            key = f"{problem.message}; {problem.fix}"  # one line per bundle, not per node
            problems.setdefault(key, problem)
    return list(problems.values())


def check_environment(inventory: Inventory, nodes: Iterable[Node], *, insecure: bool = False) -> None:
    """Raise :class:`OperatorEnvironmentError` listing every problem of :func:`environment_problems`."""
    problems = environment_problems(inventory, nodes, insecure=insecure)
    if problems:
        raise OperatorEnvironmentError(
            "this machine is not ready to reach the BMCs (no node was touched)", problems=problems
        )


def machine_warnings(inventory: Inventory, nodes: Iterable[Node] | None = None) -> list[Problem]:
    """What the inventory references that this machine lacks (password sources, CA bundles), as warnings:
    each with the field, the value (a variable's name or a path, never a secret) and the fix."""
    chosen = inventory.nodes if nodes is None else nodes
    return [
        Problem(p.path, f"on this machine: {p.message}", p.fix, p.line) for p in environment_problems(inventory, chosen)
    ]
