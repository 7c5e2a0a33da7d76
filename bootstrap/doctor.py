"""What the machine running rackctl has and lacks, each missing piece with the command that installs it."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

from bootstrap import ansible_plugins, resources
from bootstrap.inventory.profiles import version_tuple

#: the distribution whose metadata declares the extras
DIST = "rackctl"
VENV_BIN = Path(sys.executable).parent
PIP = f"{VENV_BIN / 'python'} -m pip install"


def declared(name: str) -> str:
    """``name`` with the version range rackctl's installed metadata requires of it (``name`` alone if none)."""
    try:
        lines = importlib.metadata.requires(DIST) or []
    except importlib.metadata.PackageNotFoundError:
        lines = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name == name and req.marker is None:
            return str(req)
    return name


def ansible_core_install() -> str:
    """The fix when a plugin the shipped roles use does not resolve: ansible-core as rackctl requires it."""
    return f"{PIP} '{declared('ansible-core')}'"


def extra_install(extra: str) -> str:
    """The command that installs rackctl's ``extra``."""
    return f"{PIP} 'rackctl[{extra}]'"


@dataclass(frozen=True)
class Check:
    """One requirement: a Python package (with a minimum version), a command on PATH, an extra, the plugins."""

    name: str
    kind: str  # "python" | "command" | "collection" | "collections" (the shipped plugins) | "extra"
    purpose: str
    group: str  # "core" (rackctl itself), an extra's name, "lab", "peer" (tests)
    install: str
    minimum: str | None = None
    target: str | None = None  # module/command/path/extra looked up when it differs from name
    needed_by: tuple[str, ...] = ()  # the commands that need it, when not every one does


CHECKS: tuple[Check, ...] = (
    Check("python", "python", "runs rackctl", "core", "apt-get install python3.11", "3.11"),
    Check("click", "python", "the CLI", "core", f"{PIP} 'click>=8.1'", "8.1"),
    Check("pydantic", "python", "inventory model", "core", f"{PIP} 'pydantic>=2.6'", "2.6"),
    Check("ansible-core", "python", "in-band roles", "core", f"{PIP} 'ansible-core>=2.17'", "2.17"),
    Check("ansible-runner", "python", "Ansible driver", "core", f"{PIP} 'ansible-runner>=2.4'", "2.4"),
    Check("redfish", "python", "out-of-band layer", "core", f"{PIP} 'redfish>=3.2'", "3.2"),
    Check("paramiko", "python", "SSH host-key checks", "core", f"{PIP} 'paramiko>=3.4'", "3.4"),
    Check(
        "shipped roles' collections",
        "collections",
        "the modules, lookups, filters, tests the playbooks use",
        "core",
        "",  # the fix depends on what does not resolve (_shipped_plugins)
    ),
    Check(
        "ansible-playbook",
        "command",
        "runs playbooks",
        "core",
        f"{PIP} ansible-core",
        target="ansible-playbook",
    ),
    Check("ssh", "command", "reaches nodes", "core", "apt-get install openssh-client"),
    Check(
        "rackctl[cluster]",
        "extra",
        "schema checks, Helm's SDK",
        "cluster",
        extra_install("cluster"),
        target="cluster",
        needed_by=("rackctl render cluster", "rackctl triton manifests", "rackctl up (kubernetes, nvidia, triton)"),
    ),
    Check(
        "rackctl[triton]",
        "extra",
        "Triton's client (grpc, protobuf, numpy)",
        "triton",
        extra_install("triton"),
        target="triton",
        needed_by=("rackctl triton check", "rackctl up (triton)"),
    ),
    Check(
        "rackctl[load-check]",
        "extra",
        "triton extra, tritonserver, tokenizers",
        "load-check",
        extra_install("load-check"),
        target="load-check",
        needed_by=("rackctl triton load-check",),
    ),
    Check("sushy-tools", "python", "emulated iDRACs", "lab", f"{PIP} 'sushy-tools>=1.3'", "1.3"),
    Check("aiohttp", "python", "emulated iDRAC server", "lab", f"{PIP} 'aiohttp>=3.9'", "3.9"),
    Check("sshd", "command", "SSH test hosts", "lab", "apt-get install openssh-server", target="sshd"),
    Check("ip", "command", "lab network namespaces", "lab", "apt-get install iproute2"),
    Check(
        "community.general",
        "collection",
        "peer for Redfish comparisons",
        "peer",
        f"{PIP} 'ansible>=10'",
        target="ansible_collections/community/general",
    ),
)
#: every group a check belongs to, in the order doctor lists them
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(c.group for c in CHECKS))


@dataclass(frozen=True)
class Finding:
    """The result of one check."""

    check: Check
    ok: bool
    found: str

    def as_dict(self) -> dict[str, str | bool | list[str] | None]:
        return {
            "name": self.check.name,
            "group": self.check.group,
            "ok": self.ok,
            "found": self.found,
            "purpose": self.check.purpose,
            "minimum": self.check.minimum,
            "needed_by": list(self.check.needed_by),
            "install": None if self.ok else self.check.install,
        }


def _which(command: str) -> str | None:
    local = VENV_BIN / command
    if local.exists():
        return str(local)
    for extra in ("/usr/sbin", "/sbin"):
        candidate = Path(extra) / command
        if candidate.exists():
            return str(candidate)
    return shutil.which(command)


def run_check(check: Check) -> Finding:
    """Evaluate one check."""
    if check.kind == "python" and check.name == "python":
        version = ".".join(map(str, sys.version_info[:3]))
        return Finding(check, version_tuple(version) >= version_tuple(check.minimum or "0"), version)
    if check.kind == "python":
        try:
            version = importlib.metadata.version(check.target or check.name)
        except importlib.metadata.PackageNotFoundError:
            return Finding(check, False, "missing")
        ok = check.minimum is None or version_tuple(version) >= version_tuple(check.minimum)
        return Finding(check, ok, version if ok else f"{version} (too old)")
    if check.kind == "command":
        path = _which(check.target or check.name)
        return Finding(check, path is not None, path or "missing")
    if check.kind == "collection":
        found = _collection_dir(check.target or "")
        return Finding(check, found is not None, str(found) if found else "missing")
    if check.kind == "collections":
        return _shipped_plugins(check)
    if check.kind == "extra":
        return _extra(check)
    return Finding(check, False, f"unknown check kind {check.kind}")


def _collection_dirs() -> list[Path]:
    """Where ansible-core looks for collections: ANSIBLE_COLLECTIONS_PATH (or its defaults), then sys.path."""
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
    roots = configured.split(os.pathsep) if configured else ["~/.ansible/collections", "/usr/share/ansible/collections"]
    return [Path(r).expanduser() for r in roots if r] + [Path(p) for p in sys.path if p]


def _collection_dir(target: str) -> Path | None:
    """The first installed ``ansible_collections/<namespace>/<name>`` directory, or None."""
    for root in _collection_dirs():
        candidate = root / target
        if candidate.is_dir():
            return candidate
    return None


@functools.lru_cache(maxsize=8)
def _plugins(share: Path, python: str) -> tuple[frozenset[ansible_plugins.Plugin], list[ansible_plugins.Plugin]]:
    """What the content under ``share`` uses and what of it ``python``'s ansible-core does not resolve (once per
    process: the preflight stage asks on every run, the answer does not change while rackctl runs)."""
    used = ansible_plugins.plugins_used(share)
    return frozenset(used), ansible_plugins.unresolved(used, python)


def _shipped_plugins(check: Check) -> Finding:
    """Every plugin the shipped playbooks and roles name resolves here, as ``ansible-playbook`` would resolve it."""
    try:
        used, missing = _plugins(resources.SHARE, sys.executable)
    except (ansible_plugins.UnreadableContent, RuntimeError, OSError) as exc:
        return Finding(check, False, str(exc))
    collections = sorted({p.collection for p in used if p.collection} - {"ansible.builtin", "ansible.legacy"})
    if missing:
        absent = sorted({p.collection for p in missing if p.collection} - {"ansible.builtin", "ansible.legacy"})
        install = ansible_core_install()
        if absent:  # a role naming a collection (the shipped ones name none): that collection is the fix
            install = f"{VENV_BIN / 'ansible-galaxy'} collection install {' '.join(absent)}"
        names = ", ".join(f"{p.kind} {p.name}" for p in missing)
        return Finding(replace(check, install=install), False, f"not resolved: {names}")
    return Finding(check, True, f"{len(used)} plugins resolve; " + (", ".join(collections) or "ansible.builtin only"))


def extra_requirements(extra: str, dist: str | None = None) -> list[Requirement]:
    """The requirements rackctl's (or ``dist``'s) installed metadata declares for ``extra``, extras it names
    expanded; none when it declares no such extra or is not installed."""
    dist = dist or DIST
    try:
        declared = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found: list[Requirement] = []
    for line in declared:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or not req.marker.evaluate({"extra": extra}) or req.marker.evaluate({"extra": ""}):
            continue  # a base requirement, or another extra's
        if req.name == dist:
            found += [r for other in sorted(req.extras) for r in extra_requirements(other, dist)]
        else:
            found.append(req)
    return found


def _extra(check: Check) -> Finding:
    """Every requirement of the extra installed, in the versions it asks for."""
    extra = check.target or check.name
    wanted: dict[str, SpecifierSet] = {}
    for req in extra_requirements(extra):  # one package named twice (numpy) must meet both
        wanted[req.name] = wanted.get(req.name, SpecifierSet()) & req.specifier
    if not wanted:
        return Finding(check, False, f"rackctl's installed metadata declares no extra {extra!r}")
    have, lack = [], []
    for name, specifier in wanted.items():
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            lack.append(f"{name} missing")
            continue
        if specifier and not specifier.contains(version, prereleases=True):
            lack.append(f"{name} {version} (wants {specifier})")
        else:
            have.append(f"{name} {version}")
    return Finding(check, not lack, "; ".join(lack) if lack else ", ".join(have))


def run_doctor(groups: set[str] | None = None) -> list[Finding]:
    """Run the checks of ``groups`` (all when None)."""
    return [run_check(c) for c in CHECKS if groups is None or c.group in groups]
