"""What the mirror must hold: the packages every role asks for (the roles declare them).

The convention: a role that installs Debian packages lists them in its ``defaults/main.yml`` as
``<role>_packages`` (names, or ``name=version`` to pin one) and installs exactly that list. The
manifest is the union over the roles, plus the inventory's ``site_services.packages.pins``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.errors import InvalidInput, Problem

PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION_RE = re.compile(r"^[A-Za-z0-9.+~:-]+$")


@dataclass(frozen=True)
class Request:
    """One package a role asks for, and the version it pins (None: whatever the mirror pinned)."""

    name: str
    version: str | None
    role: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "role": self.role}


@dataclass
class Manifest:
    """The requests of every role, and the suite they are resolved in."""

    suite: str
    components: list[str]
    requests: list[Request] = field(default_factory=list)

    def pinned(self) -> dict[str, str | None]:
        """Package -> pinned version (None: the suite's candidate), one entry per package."""
        out: dict[str, str | None] = {}
        for req in self.requests:
            if out.get(req.name) is None:
                out[req.name] = req.version
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "components": self.components,
            "packages": self.pinned(),
            "requests": [r.as_dict() for r in self.requests],
        }


def parse_request(text: str, role: str, where: str) -> Request:
    """``name`` or ``name=version``; a clear error naming the role file otherwise."""
    name, _, version = str(text).partition("=")
    name, version = name.strip(), version.strip()
    if not PACKAGE_RE.match(name) or (version and not VERSION_RE.match(version)):
        raise InvalidInput(
            f"role {role} asks for an invalid package {text!r}",
            problems=[Problem(where, f"{text!r} is not a Debian package name", "write `name` or `name=version`")],
        )
    return Request(name=name, version=version or None, role=role)


def role_requests(roles_dir: Path) -> list[Request]:
    """Every ``<role>_packages`` list in ``roles_dir/*/defaults/main.yml``, in role order."""
    requests: list[Request] = []
    for defaults in sorted(Path(roles_dir).glob("*/defaults/main.yml")):
        role = defaults.parent.parent.name
        data = yaml.safe_load(defaults.read_text(encoding="utf-8")) or {}
        key = f"{role}_packages"
        values = data.get(key) if isinstance(data, dict) else None
        if values is None:
            continue
        where = f"{defaults}: {key}"
        if not isinstance(values, list):
            raise InvalidInput(
                f"role {role}: {key} is not a list",
                problems=[Problem(where, f"got {type(values).__name__}", "make it a YAML list of package names")],
            )
        requests.extend(parse_request(v, role, where) for v in values)
    return requests


def build_manifest(inventory: Any, roles_dir: Path) -> Manifest:
    """The manifest for ``inventory``: the roles' packages and the inventory's pins."""
    source = inventory.site_services.packages
    requests = role_requests(roles_dir)
    for name, version in source.pins.items():
        requests.append(parse_request(f"{name}={version}", "inventory", f"site_services.packages.pins.{name}"))
    _refuse_conflicting_pins(requests)
    return Manifest(suite=source.suite, components=list(source.components), requests=requests)


def _refuse_conflicting_pins(requests: list[Request]) -> None:
    """Two roles (or a role and the inventory) pinning one package to different versions cannot both win."""
    pins: dict[str, list[Request]] = {}
    for req in requests:
        if req.version:
            pins.setdefault(req.name, []).append(req)
    problems = [
        Problem(f"{name}", "pinned to " + ", ".join(f"{r.version} ({r.role})" for r in reqs), "pin one version")
        for name, reqs in pins.items()
        if len({r.version for r in reqs}) > 1
    ]
    if problems:
        raise InvalidInput("packages pinned to different versions", problems=problems)
