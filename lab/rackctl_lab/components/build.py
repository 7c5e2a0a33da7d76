"""Build the lab's pinned Go programs with ``go build``, once, into a cache keyed like the OS image's.

Each program is built in a small generated module that requires its upstream module at the pinned version
(for ``k8s.io/kubernetes``, every staging module replaced by its published version), with ``GOTOOLCHAIN=local``
and ``CGO_ENABLED=0``: nothing but Go modules comes in, through the ``go`` command. The binary lands in
``<cache>/components/<name>/<version>-<key>/<name>`` where the key hashes the pin, the build flags and the Go
version; a second build of the same pin is a cache hit. Each entry has a ``build.json`` (module, version, Go,
seconds, sha256).

CRDs (:func:`generate_crds`) are made the same way: ``controller-gen`` is built as a program, then run over
the API package of a project's module at its pin (in a build module requiring it, tidied once), and the
generated ``*.yaml`` land in ``<cache>/components/crds/<name>/<version>-<key>/`` with their ``build.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem, RackctlError
from bootstrap.provision.ramdisk import cache_lock, cache_root, mark_used
from rackctl_lab.components.pins import (
    GO_MINIMUM,
    GROUPS,
    RELEASES,
    CrdSource,
    GoProgram,
    KubernetesRelease,
    programs,
)

#: The lab's own Go programs (``GoProgram.source`` names a directory here).
SOURCES = Path(__file__).resolve().parent
#: Bump when the build recipe changes what it produces (part of every cache key).
RECIPE = 1
#: The module path prefix of the lab's own programs (their source needs nothing but the standard library).
LAB_MODULE = "rackctl.lab/"
VERSION_FIELD = "cluster.versions.kubernetes"


class BuildFailed(RackctlError):
    """``go`` refused or failed a build: the message carries its last words."""


@dataclass(frozen=True)
class Built:
    """One program's binary and how it came to be."""

    name: str
    module: str
    version: str
    path: str
    cached: bool
    seconds: float
    sha256: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def release_for(version: str, source: str = VERSION_FIELD) -> KubernetesRelease:
    """The pins of ``version`` (read from ``source``, by default the inventory's field), or a refusal naming it."""
    plain = version.removeprefix("v")
    if plain in RELEASES:
        return RELEASES[plain]
    known = ", ".join(RELEASES)
    raise InvalidInput(
        f"the lab cannot build Kubernetes {version}",
        problems=[
            Problem(
                source,
                f"{version!r} has no pinned components in the lab (it builds {known})",
                f"set {source} to one of {known}, or pin the release in rackctl_lab/components/pins.py "
                "(RELEASES: its etcd, CoreDNS and pause from `kubeadm config images list`)",
            )
        ],
    )


def select(release: KubernetesRelease, only: Iterable[str] = ()) -> list[GoProgram]:
    """The release's programs, narrowed to the groups or names in ``only`` (every one when empty)."""
    wanted = set(only)
    everything = programs(release)
    unknown = wanted - set(GROUPS) - {p.name for p in everything}
    if unknown:
        names = ", ".join([*GROUPS, *(p.name for p in everything)])
        raise InvalidInput(
            f"--only {', '.join(sorted(unknown))}: no such component group or program",
            problems=[Problem("--only", f"unknown: {', '.join(sorted(unknown))}", f"use one of {names}")],
        )
    return [p for p in everything if not wanted or p.group in wanted or p.name in wanted]


def go_version(go: str = "go") -> str:
    """``go1.26.8``, or a refusal (exit 3) when no usable Go toolchain is on PATH."""
    path = shutil.which(go)
    if not path:
        raise EnvironmentMissing(
            "no Go toolchain: the lab builds its Kubernetes components with `go build`",
            problems=[Problem("go", "not on PATH", f"install Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer")],
        )
    out = subprocess.run([path, "env", "GOVERSION"], capture_output=True, text=True, check=False, env=_go_env())
    found = out.stdout.strip()
    match = re.fullmatch(r"go(\d+)\.(\d+)(?:\.\d+)?", found)
    if not match or (int(match[1]), int(match[2])) < GO_MINIMUM:
        raise EnvironmentMissing(
            f"Go {found or '(unknown)'} is too old for the lab's components",
            problems=[Problem("go", found or out.stderr.strip(), f"install Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]}+")],
        )
    return found


def cache_dir() -> Path:
    return cache_root() / "components"


def entry_for(program: GoProgram, go: str) -> Path:
    """Where ``program`` built with Go ``go`` lives in the cache."""
    spec = json.dumps([_fields(program), go, RECIPE, os.uname().machine, _source_digest(program)], sort_keys=True)
    key = hashlib.sha256(spec.encode()).hexdigest()[:12]
    return cache_dir() / program.name / f"{program.version}-{key}"


def _fields(program: GoProgram) -> dict[str, object]:
    """``program``'s fields for a cache key; an empty ``also`` is left out (the keys from before it stay)."""
    fields = asdict(program)
    if not program.also:
        del fields["also"]
    return fields


def plan(selected: list[GoProgram], go: str) -> list[dict[str, object]]:
    """What a build would do: each program with its pin and whether the cache has it."""
    return [
        {
            "name": p.name,
            "module": p.module,
            "version": p.version,
            "group": p.group,
            "cached": (entry_for(p, go) / p.name).is_file(),
            "path": str(entry_for(p, go) / p.name),
        }
        for p in selected
    ]


Progress = Callable[[str], None]


def build(selected: list[GoProgram], *, progress: Progress = lambda _msg: None) -> list[Built]:
    """Build (or find in the cache) every program in ``selected``, in order."""
    go = go_version()
    results: list[Built] = []
    for index, program in enumerate(selected, 1):
        progress(f"[{index}/{len(selected)}] {program.ident} ({program.module})")
        results.append(_build_one(program, go, progress))
    return results


def _build_one(program: GoProgram, go: str, progress: Progress) -> Built:
    entry = entry_for(program, go)
    binary = entry / program.name
    with cache_lock(entry.parent):  # one program at a time; other programs' builds and hits go on
        if binary.is_file() and (entry / "build.json").is_file():
            mark_used(entry)
            record = json.loads((entry / "build.json").read_text())
            return Built(program.name, program.module, program.version, str(binary), True, 0.0, record["sha256"])
        start = time.monotonic()
        workdir = _module_dir(program, go)
        tmp = entry.with_name(entry.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        flags = ["-trimpath", "-ldflags", " ".join(["-s", "-w", *program.ldflags])]
        if program.tags:
            flags += ["-tags", ",".join(program.tags)]
        progress(f"go build {program.package}")
        _go(["build", *flags, "-o", str(tmp / program.name), program.package], workdir, program)
        seconds = round(time.monotonic() - start, 1)
        digest = hashlib.sha256((tmp / program.name).read_bytes()).hexdigest()
        record = {"module": program.module, "version": program.version, "go": go, "seconds": seconds, "sha256": digest}
        (tmp / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(entry, ignore_errors=True)
        tmp.rename(entry)
        progress(f"{program.name}: built in {seconds:.0f} s")
        return Built(program.name, program.module, program.version, str(binary), False, seconds, digest)


@dataclass(frozen=True)
class GeneratedCrds:
    """The CRD files controller-gen made from one project's API types, and how they came to be."""

    name: str
    module: str
    version: str
    generator: str  #: ``controller-gen vX.Y.Z``
    files: tuple[str, ...]
    cached: bool
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def crd_entry_for(source: CrdSource, go: str) -> Path:
    """Where the CRDs of ``source`` generated with Go ``go`` live in the cache."""
    spec = json.dumps([_fields(source.api), _fields(source.generator), go, RECIPE, os.uname().machine], sort_keys=True)
    key = hashlib.sha256(spec.encode()).hexdigest()[:12]
    return cache_dir() / "crds" / source.name / f"{source.api.version}-{key}"


def generate_crds(source: CrdSource, *, progress: Progress = lambda _msg: None) -> GeneratedCrds:
    """Build (or find) ``controller-gen`` and generate the CRDs of ``source``'s API package (or find them)."""
    go = go_version()
    entry = crd_entry_for(source, go)
    with cache_lock(entry.parent):
        record_path = entry / "build.json"
        if record_path.is_file():
            mark_used(entry)
            record = json.loads(record_path.read_text())
            files = tuple(str(entry / name) for name in record["files"])
            return GeneratedCrds(
                source.name, source.api.module, source.api.version, record["generator"], files, True, 0.0
            )
        start = time.monotonic()
        progress(f"[1/2] {source.generator.ident} ({source.generator.module})")
        generator = _build_one(source.generator, go, progress)
        progress(f"[2/2] {source.ident}: {source.api.package}")
        workdir = _module_dir(source.api, go)
        tmp = entry.with_name(entry.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        paths = ";".join((source.api.package, *source.api.also))
        args = ["crd:crdVersions=v1", f"paths={paths}", f"output:crd:dir={tmp}"]
        progress(f"controller-gen {' '.join(args[:2])}")
        proc = subprocess.run(
            [generator.path, *args], cwd=workdir, capture_output=True, text=True, check=False, env=_go_env()
        )
        names = sorted(p.name for p in tmp.glob("*.yaml"))
        if proc.returncode != 0 or not names:
            words = "\n".join((proc.stderr or proc.stdout or "no CRD written").strip().splitlines()[-15:])
            raise BuildFailed(f"controller-gen failed for {source.ident} ({source.api.package}):\n{words}")
        seconds = round(time.monotonic() - start, 1)
        record = {
            "module": source.api.module,
            "version": source.api.version,
            "package": source.api.package,
            "generator": source.generator.ident,
            "go": go,
            "seconds": seconds,
            "files": names,
            "sha256": {name: hashlib.sha256((tmp / name).read_bytes()).hexdigest() for name in names},
        }
        (tmp / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(entry, ignore_errors=True)
        tmp.rename(entry)
        progress(f"{source.name} CRDs: {len(names)} generated in {seconds:.0f} s")
        files = tuple(str(entry / name) for name in names)
        return GeneratedCrds(
            source.name, source.api.module, source.api.version, source.generator.ident, files, False, seconds
        )


def _source_digest(program: GoProgram) -> str:
    """The hash of a lab program's own Go source (empty for a program built from a module)."""
    folders = [SOURCES / program.source] if program.source else []
    folders += [SOURCES / "shims" / folder for _, folder in program.shims]
    if not folders:
        return ""
    files = sorted(f for folder in folders for f in folder.rglob("*") if f.suffix in (".go", ".mod"))
    return hashlib.sha256(b"".join(str(f.relative_to(SOURCES)).encode() + f.read_bytes() for f in files)).hexdigest()


def _module_dir(program: GoProgram, go: str) -> Path:
    """A build module requiring ``program.module@version`` (tidied once; shared by its programs)."""
    if program.source:
        return _source_module(program, go)
    shims = [_source_digest(program)] if program.shims else []  # a shim's change is a new module
    also = [list(program.also)] if program.also else []  # more packages imported: a new module
    spec = json.dumps([program.module, program.version, program.staging, program.replaces, go, RECIPE, *shims, *also])
    workdir = cache_dir() / "src" / hashlib.sha256(spec.encode()).hexdigest()[:12]
    with cache_lock(workdir):
        if not (workdir / "go.sum").is_file():
            _write_module(program, workdir)
    return workdir


def _source_module(program: GoProgram, go: str) -> Path:
    """A module of the lab's own source for ``program``: the standard library only, or, where ``module`` is
    not the lab's own, requiring ``module@version`` (tidied once)."""
    own = program.module.startswith(LAB_MODULE)
    digest = _source_digest(program)
    if not own:  # the required module's version is part of what is built
        digest = hashlib.sha256(f"{digest} {program.module}@{program.version}".encode()).hexdigest()
    workdir = cache_dir() / "src" / f"{program.name}-{digest[:12]}"
    with cache_lock(workdir):
        if not (workdir / ("go.mod" if own else "go.sum")).is_file():
            workdir.mkdir(parents=True, exist_ok=True)
            for source in (SOURCES / program.source).glob("*.go"):
                shutil.copy2(source, workdir / source.name)
            if own:
                (workdir / "go.mod").write_text(f"module {program.module}\n\ngo 1.26.0\n")
            else:
                module = (
                    f"module rackctl.lab/{program.name}\n\ngo 1.26.0\n\nrequire {program.module} {program.version}\n"
                )
                (workdir / "go.mod").write_text(module)
                _go(["mod", "tidy"], workdir, program)
    return workdir


def _write_module(program: GoProgram, workdir: Path) -> None:
    replaces = list(program.replaces)
    if program.staging:
        replaces += [(m, program.staging) for m in _staging_modules(program, workdir)]
    lines = ["module rackctl.lab/components", "", "go 1.26.0", "", f"require {program.module} {program.version}", ""]
    targets = [(m, f"{m} {v}") for m, v in sorted(replaces)]
    for module, folder in program.shims:
        shutil.copytree(SOURCES / "shims" / folder, workdir / "shims" / folder, dirs_exist_ok=True)
        targets.append((module, f"./shims/{folder}"))
    if targets:
        lines += ["replace (", *(f"\t{m} => {t}" for m, t in targets), ")", ""]
    (workdir / "go.mod").write_text("\n".join(lines))
    # Every main package of the module is imported here, so one `go mod tidy` serves each of its programs.
    packages = sorted({program.package, *program.also, *(p.package for p in _siblings(program))})
    imports = "\n".join(f'\t_ "{pkg}"' for pkg in packages)
    (workdir / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    _go(["mod", "tidy"], workdir, program)


def _siblings(program: GoProgram) -> list[GoProgram]:
    """Programs of every release built from the same module at the same version."""
    return [
        p
        for release in RELEASES.values()
        for p in programs(release)
        if (p.module, p.version, p.staging) == (program.module, program.version, program.staging)
    ]


def _staging_modules(program: GoProgram, workdir: Path) -> list[str]:
    """The ``k8s.io/*`` modules upstream's go.mod replaces with ``./staging/...`` paths."""
    out = _go(["mod", "download", "-json", f"{program.module}@{program.version}"], workdir, program)
    gomod = Path(json.loads(out)["GoMod"]).read_text()
    return re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, flags=re.MULTILINE)


def _go_env(*, cgo: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "1" if cgo else "0", "GOWORK": "off"})
    return env


def _go(args: list[str], workdir: Path, program: GoProgram) -> str:
    env = _go_env(cgo=program.cgo)
    proc = subprocess.run(["go", *args], cwd=workdir, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        words = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BuildFailed(f"go {args[0]} failed for {program.ident} ({program.module}):\n{words}")
    return proc.stdout
