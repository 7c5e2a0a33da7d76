"""What the mirror must hold: the packages every role asks for (the roles declare them).

The convention: a role that installs Debian packages lists them in its ``defaults/main.yml`` as
``<role>_packages`` (names, or ``name=version`` to pin one) and installs exactly that list. The
manifest is the union over the roles, plus the inventory's ``site_services.packages.pins``, plus what
the extra upstream repositories provide (:mod:`bootstrap.mirror.upstreams`: kubeadm/kubelet/kubectl at
the cluster's version, the host driver), whose versions are globs such as ``1.31.2-*``: the upstream
version the inventory names, at whatever Debian revision the repository gives it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.errors import InvalidInput, Problem
from bootstrap.mirror.upstreams import (
    CONTAINERD_PACKAGE,
    CONTAINERD_ROLE,
    DISTRIBUTION_CONTAINERD,
    ExtraRepo,
    mirror_upstreams,
)

PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION_RE = re.compile(r"^[A-Za-z0-9.+~:-]+$")


@dataclass(frozen=True)
class Request:
    """One package a role asks for, and the version it pins (None: whatever the mirror pinned)."""

    name: str
    version: str | None
    role: str
    #: where it comes from: ``debian`` (the distribution) or an extra upstream's name (``kubernetes``, ...)
    origin: str = "debian"
    #: the inventory field that decides the version, for messages (None: the role's file or the pins)
    field: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "version": self.version, "role": self.role, "origin": self.origin}
        if self.field:
            data["field"] = self.field
        return data


def version_matches(wanted: str, have: str) -> bool:
    """``have`` is the exact version ``wanted`` names, or matches it where ``wanted`` is a glob (``1.31.2-*``)."""
    return fnmatch.fnmatchcase(have, wanted) if "*" in wanted else have == wanted


@dataclass
class Manifest:
    """The requests of every role, and the suite they are resolved in."""

    suite: str
    components: list[str]
    requests: list[Request] = field(default_factory=list)
    #: the extra upstream repositories and, in words, the ones the inventory leaves out
    upstreams: list[ExtraRepo] = field(default_factory=list)
    upstream_notes: list[str] = field(default_factory=list)

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
            "upstreams": [u.as_dict() for u in self.upstreams],
            "upstream_notes": self.upstream_notes,
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
    """The manifest for ``inventory``: the roles' packages, the inventory's pins and the extra upstreams'."""
    source = inventory.site_services.packages
    requests = role_requests(roles_dir)
    for name, version in source.pins.items():
        requests.append(parse_request(f"{name}={version}", "inventory", f"site_services.packages.pins.{name}"))
    extra = mirror_upstreams(inventory)
    if any(p.name == CONTAINERD_PACKAGE for p in extra.packages):  # it replaces (and conflicts with) these
        requests = [r for r in requests if not (r.role == CONTAINERD_ROLE and r.name in DISTRIBUTION_CONTAINERD)]
    requests.extend(Request(p.name, p.version, p.role, p.origin, p.field) for p in extra.packages)
    _refuse_conflicting_pins(requests)
    return Manifest(
        suite=source.suite,
        components=list(source.components),
        requests=requests,
        upstreams=list(extra.repos),
        upstream_notes=list(extra.notes),
    )


def _refuse_conflicting_pins(requests: list[Request]) -> None:
    """Two roles (or a role and the inventory) pinning one package to different versions cannot both win."""
    pins: dict[str, list[Request]] = {}
    for req in requests:
        if req.version:
            pins.setdefault(req.name, []).append(req)
    problems = [
        Problem(
            f"{name}", "pinned to " + ", ".join(f"{r.version} ({r.field or r.role})" for r in reqs), "pin one version"
        )
        for name, reqs in pins.items()
        if len({r.version for r in reqs}) > 1
    ]
    if problems:
        raise InvalidInput("packages pinned to different versions", problems=problems)
