"""What the machine running rackctl has and lacks, each missing piece with the command that installs it."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bootstrap import resources
from bootstrap.inventory.profiles import version_tuple

VENV_BIN = Path(sys.executable).parent
PIP = f"{VENV_BIN / 'python'} -m pip install"
CLUSTER = f"{PIP} 'rackctl[cluster]'"
TRITON = f"{PIP} 'rackctl[triton]'"
# a task's module (or a filter/lookup) named by its fully qualified name: namespace.collection.name
_FQCN = re.compile(r"^\s*(?:- )?([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*:", re.MULTILINE)


@dataclass(frozen=True)
class Check:
    """One requirement: a Python package (with a minimum version) or a command on PATH."""

    name: str
    kind: str  # "python" | "command" | "collection" | "file"
    purpose: str
    group: str  # "core" (rackctl itself), "cluster"/"triton" (extras), "lab", "peer" (tests)
    install: str
    minimum: str | None = None
    target: str | None = None  # module/command/path looked up when it differs from name


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
        "modules the shipped playbooks use",
        "core",
        "ansible-galaxy collection install",
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
    Check("sushy-tools", "python", "emulated iDRACs", "lab", f"{PIP} 'sushy-tools>=1.3'", "1.3"),
    Check("aiohttp", "python", "emulated iDRAC server", "lab", f"{PIP} 'aiohttp>=3.9'", "3.9"),
    Check("sshd", "command", "SSH test hosts", "lab", "apt-get install openssh-server", target="sshd"),
    Check("ip", "command", "lab network namespaces", "lab", "apt-get install iproute2"),
    Check("tritonclient", "python", "Triton config parse, load checks", "triton", TRITON, "2.41"),
    Check("nvidia-pytriton", "python", "tritonserver binary for load checks", "triton", f"{PIP} nvidia-pytriton"),
    Check("kubernetes-validate", "python", "render cluster: schemas", "cluster", CLUSTER, "1.30"),
    Check("jsonschema", "python", "render cluster: CRD schemas", "cluster", CLUSTER, "4.21"),
    Check("helm-python-sdk", "python", "render cluster: charts", "cluster", CLUSTER, "0.2.2"),
    Check(
        "community.general",
        "collection",
        "peer for Redfish comparisons",
        "peer",
        f"{PIP} 'ansible>=10'",
        target="ansible_collections/community/general",
    ),
)


@dataclass(frozen=True)
class Finding:
    """The result of one check."""

    check: Check
    ok: bool
    found: str

    def as_dict(self) -> dict[str, str | bool | None]:
        return {
            "name": self.check.name,
            "group": self.check.group,
            "ok": self.ok,
            "found": self.found,
            "purpose": self.check.purpose,
            "minimum": self.check.minimum,
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
        return _shipped_collections(check)
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


def collections_used(share: Path | None = None) -> set[str]:
    """The collections (``namespace.name``) the shipped playbooks and roles name, ansible.builtin left out."""
    base = share or resources.SHARE
    files = [*(base / "playbooks").rglob("*.yml"), *(base / "roles").glob("*/tasks/*.yml")]
    files += [*(base / "roles").glob("*/handlers/*.yml")]
    used = {f"{m[1]}.{m[2]}" for f in files for m in _FQCN.finditer(f.read_text(encoding="utf-8"))}
    return {c for c in used if c not in {"ansible.builtin", "ansible.legacy"}}


def _shipped_collections(check: Check) -> Finding:
    """Every collection the shipped roles use is installed (none is: the roles use ansible-core's builtins)."""
    used = sorted(collections_used())
    missing = [c for c in used if _collection_dir("ansible_collections/" + c.replace(".", "/")) is None]
    if missing:
        install = f"{check.install} {' '.join(missing)}"
        return Finding(replace(check, install=install), False, "missing " + ", ".join(missing))
    return Finding(check, True, ", ".join(used) if used else "ansible.builtin only")


def run_doctor(groups: set[str] | None = None) -> list[Finding]:
    """Run the checks of ``groups`` (all when None)."""
    return [run_check(c) for c in CHECKS if groups is None or c.group in groups]
