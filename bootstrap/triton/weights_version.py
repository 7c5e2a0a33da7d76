"""Versions of a model's delivered files: one directory per content, the Deployment pointing at one.

``rackctl triton deliver`` puts each delivery of a model's files (``storage.kind: node`` with a
``source_dir``) in a directory of its own on each node, beside the model directory the inventory names::

    <node_dir>/<hf_model_dir below mount_path>@<id>/    e.g. /mnt/nvme/rackctl-models/llama-3-8b@3fa9c2e1b7d0/

``<id>`` names the content: the first 12 hex digits of a sha256 over the sorted (path, size, sha256) list
of the source's files (:func:`version_id`), so the same files always land in the same directory and new
files in a new one. A running pod's files never change under it: the rendered configs name
``<hf_model_dir>@<id>`` (inside the same read-only mount), so new content changes the model repository,
hence the pod template, and Kubernetes rolls the Deployment (a new pod ready before an old one goes).

The id is recorded by delivery in ``<state-dir>/`` :data:`RECORD` (per model: the version every serving node
holds, each node's versions newest first, each version's file list; the triton stage adds the versions it
applied to the cluster, ``applied``) and read by the render
(:func:`served_specs`): the render never hashes hundreds of GB, and it refuses a model whose files were never
delivered, or whose ``source_dir`` lists other files than the recorded version (delivered, then changed).

Models with no rackctl-made version: ``storage.kind: nfs`` (read in place on the export) and a model without
``source_dir`` (placed on the nodes beforehand); their configs name ``hf_model_dir`` as declared.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.source_listing import source_sizes

if TYPE_CHECKING:
    from bootstrap.triton.source_listing import SourceFile

#: The record of delivered versions, in the state dir.
RECORD = "triton-weights.json"
#: Versions each node keeps by default: the one delivered and the one before it (for a rollback).
KEEP = 2
ID_LENGTH = 12
VERSION_SUFFIX = re.compile(rf"@([0-9a-f]{{{ID_LENGTH}}})$")
#: The pod template annotation naming the weights version (or why there is none).
ANNOTATION = "rackctl.io/weights-version"


def version_id(files: Iterable[SourceFile]) -> str:
    """The id of a set of files: sha256 over the sorted (relative path, size, sha256) lines, 12 hex digits."""
    digest = hashlib.sha256()
    for item in sorted(files, key=lambda f: f.rel):
        digest.update(f"{item.rel}\0{item.size}\0{item.sha256}\n".encode())
    return digest.hexdigest()[:ID_LENGTH]


def versioned(path: str, vid: str) -> str:
    """``path`` (the model directory on the node, or ``hf_model_dir`` in the pod) at version ``vid``."""
    return f"{path.rstrip('/')}@{vid}"


def version_of(path: str) -> str | None:
    """The version id a versioned directory names, else None."""
    found = VERSION_SUFFIX.search(path.rstrip("/"))
    return found.group(1) if found else None


def choose_versions(
    current: str, held: Sequence[str], keep: int, protect: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """Which of a node's versions stay and which are old: ``held`` newest first; ``current`` (just delivered)
    and the next ``keep - 1`` stay, and so does any version in ``protect`` (the one the rendered Deployment
    uses); returns (kept, old), each newest first."""
    others = [v for v in held if v != current]
    kept = [current, *others[: max(keep - 1, 0)]]
    kept += [v for v in others if v in set(protect) and v not in kept]
    return kept, [v for v in others if v not in kept]


def in_use(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The versions a model's record says pods may read: the one the render points at, and the last two the
    triton stage applied (during a rollout both run). Delivery never removes these."""
    found = [entry.get("version"), *entry.get("applied", [])]
    return tuple(dict.fromkeys(v for v in found if v))


def note_applied(state_dir: Path, model: str, weights: str | None) -> None:
    """Record that the Deployment applied for ``model`` names version ``weights`` (its pod template's
    :data:`ANNOTATION`; nothing for a model without a version)."""
    if weights is None or not VERSION_SUFFIX.search("@" + weights):
        return
    models = load_record(state_dir)
    entry = models.setdefault(model, {"version": None, "nodes": {}, "files": {}})
    entry["applied"] = list(dict.fromkeys([weights, *entry.get("applied", [])]))[:2]
    save_record(state_dir, models)


def record_path(state_dir: Path) -> Path:
    return state_dir / RECORD


def load_record(state_dir: Path) -> dict[str, Any]:
    """The delivered versions per model (empty when nothing was delivered yet)."""
    path = record_path(state_dir)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise InvalidInput(
            f"{path} is not JSON: {exc}",
            problems=[Problem(str(path), "unreadable record of delivered versions", "run `rackctl triton deliver`")],
        ) from None
    return data.get("models", {}) if isinstance(data, dict) else {}


def save_record(state_dir: Path, models: Mapping[str, Any]) -> None:
    atomic_write_text(record_path(state_dir), json.dumps({"models": models}, indent=1, sort_keys=True) + "\n")


def record_delivery(  # noqa: PLR0917 - one model's delivery, as recorded
    models: dict[str, Any],
    spec: ModelSpec,
    vid: str,
    files: Sequence[SourceFile],
    held: Mapping[str, list[str]],
    serving: Sequence[str],
) -> None:
    """Note in ``models`` (the record) that ``held`` (node -> its versions, newest first) is what the nodes
    hold now; the model's ``version`` becomes ``vid`` once every serving node holds it."""
    entry = models.setdefault(spec.name, {"version": None, "nodes": {}, "files": {}})
    entry["source_dir"] = spec.source_dir
    entry["nodes"].update(held)
    entry["files"][vid] = [[f.rel, f.size, f.sha256] for f in files]
    if all(entry["nodes"].get(node, [None])[0] == vid for node in serving):
        entry["version"] = vid
    alive = {v for versions in entry["nodes"].values() for v in versions} | set(in_use(entry))
    entry["files"] = {v: listing for v, listing in entry["files"].items() if v in alive}


def at_version(spec: ModelSpec, vid: str) -> ModelSpec:
    """``spec`` with its configs naming version ``vid`` of ``hf_model_dir`` (the tokenizer too, when it
    came in the same directory)."""
    update = {"hf_model_dir": versioned(spec.hf_model_dir, vid)}
    if spec.tokenizer_dir and spec.tokenizer_dir.rstrip("/") == spec.hf_model_dir.rstrip("/"):
        update["tokenizer_dir"] = update["hf_model_dir"]
    return spec.model_copy(update=update)


def why_unversioned(spec: ModelSpec) -> str | None:
    """Why ``spec``'s files have no rackctl-made version (None when they have one)."""
    if spec.deployment.storage.kind == "nfs":
        return "none: read in place on the NFS export (rackctl makes no version)"
    if not spec.source_dir:
        return "none: placed on the nodes beforehand (no source_dir; rackctl makes no version)"
    return None


def served_spec(spec: ModelSpec, record: Mapping[str, Any]) -> tuple[ModelSpec, list[Problem]]:
    """The spec the render uses: at the recorded version of a delivered model; a model with ``source_dir``
    whose files were never delivered to every serving node, or changed since, is a problem naming the fix."""
    if why_unversioned(spec) or version_of(spec.hf_model_dir):
        return spec, []
    entry = record.get(spec.name) or {}
    vid = entry.get("version")
    fix = f"run `rackctl triton deliver --model {spec.name}`, then render again"
    if not vid:
        where = "every node serving it" if entry else "any node"
        return spec, [
            Problem(
                f"models[{spec.name}].source_dir",
                f"no version of {spec.source_dir} was delivered to {where} (no {RECORD} entry names one); "
                "the Deployment would point at files that are not there",
                fix,
            )
        ]
    return at_version(spec, vid), _changed_since(spec, entry, vid, fix)


def _changed_since(spec: ModelSpec, entry: Mapping[str, Any], vid: str, fix: str) -> list[Problem]:
    """A problem when ``source_dir`` (readable here) lists other files or sizes than version ``vid``: the
    render would point at the old files. Reads names and sizes only."""
    source = Path(spec.source_dir or "")
    recorded = [(rel, size) for rel, size, _ in entry.get("files", {}).get(vid, [])]
    if entry.get("source_dir") != spec.source_dir:
        changed = f"source_dir is {spec.source_dir}, version {vid} came from {entry.get('source_dir')}"
    elif source.is_dir() and recorded and source_sizes(source) != recorded:
        changed = f"{source} lists other files or sizes than the delivered version {vid}"
    else:
        return []
    return [Problem(f"models[{spec.name}].source_dir", changed, fix)]


def served_specs(specs: Sequence[ModelSpec], state_dir: Path) -> list[ModelSpec]:
    """Every spec at its delivered version (:func:`served_spec`); refused (exit 2) naming each model's problem."""
    record = load_record(state_dir)
    out, problems = [], []
    for spec in specs:
        served, found = served_spec(spec, record)
        out.append(served)
        problems += found
    if problems:
        raise InvalidInput(f"{len(problems)} model(s) without a delivered version to point at", problems=problems)
    return out


def annotation(spec: ModelSpec) -> str:
    """The pod template's :data:`ANNOTATION`: the version the configs name, or why there is none."""
    vid = version_of(spec.hf_model_dir)
    if vid:
        return vid
    return why_unversioned(spec) or "not delivered: run `rackctl triton deliver` and render again"
