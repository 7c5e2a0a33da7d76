"""Deliver a model's files to the GPU nodes that will serve it, over the SSH rackctl reaches nodes by.

Per model with a ``source_dir`` (``storage.kind: node``): the files are checked against the declaration
(:mod:`bootstrap.triton.model_files`) before anything is sent; then every GPU node whose GPU product is
the model's (and that has TP x PP GPUs) gets a copy at ``<node_dir>/<hf_model_dir below mount_path>@<id>``,
the version of those files (:mod:`bootstrap.triton.weights_version`: files are never changed under a running
pod), all nodes in parallel, one SSH session per node (:mod:`bootstrap.triton.delivery_agent`):

- only what differs is sent: the node hashes what it holds (sha256), rackctl sends the files whose size
  or hash differ, so a corrupted file is found and sent again;
- an interrupted copy resumes: the node keeps the bytes of a file in flight (``.<name>.rackctl-part``),
  the next run sends the rest;
- each file's sha256 is checked on arrival before it takes its name; a mismatch is removed and sent
  again once, then reported;
- a new version starts as hard links to the newest version's files on the node: only the files that changed
  cross the network; those carried over from the previous version that the source no longer has are removed;
- files on the node that the source no longer has are reported (``extra_files``: a loader reading every
  ``*.safetensors`` would take a stale shard), and removed only when asked (``prune``);
- each node keeps the version delivered and the one before it (``keep``), and any version the rendered
  Deployment uses (``protect``); older ones are reported (``versions_old``) and removed only with ``prune``.

The sha256 of each source file is read once, before the plan or the copies
(:func:`~bootstrap.triton.source_listing.source_files`): the version id is made of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import subprocess
import threading
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from bootstrap.errors import InvalidInput, Problem, RackctlError
from bootstrap.inventory.hardware import GPU_TYPES
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.delivery_agent import AGENT
from bootstrap.triton.model_files import check_files
from bootstrap.triton.source_listing import SourceFile, source_files
from bootstrap.triton.weights_version import KEEP, choose_versions, version_id, version_of, versioned

if TYPE_CHECKING:  # the access model is passed in by the command; importing it here would close a cycle
    from bootstrap.inband.access import NodeAccess

CHUNK = 1 << 20
#: Nodes copied to at the same time (one ssh each).
MAX_NODES_AT_ONCE = 64
#: Progress callback: (node, bytes just done): sent, or found in place (unchanged, or the part resumed).
Progress = Callable[[str, int], None]


def _node_dict(result: NodeDelivery | PlacedCheck) -> dict[str, Any]:
    """A node's result for ``--json``: its fields in order, ``ok`` (no error) after ``node`` and ``dest``."""
    data = dataclasses.asdict(result)
    return {"node": data.pop("node"), "dest": data.pop("dest"), "ok": result.error is None, **data}


@dataclass
class NodeDelivery:
    """What one node got."""

    node: str
    dest: str
    sent_files: list[str] = field(default_factory=list)
    sent_bytes: int = 0
    resumed_from: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0
    resent_after_mismatch: list[str] = field(default_factory=list)
    extra_files: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    #: the version delivered (None for a directory that is no version)
    version: str | None = None
    #: the versions the node keeps after this run, newest first (the delivered one first)
    versions_kept: list[str] = field(default_factory=list)
    #: older versions left in place (``prune`` removes them)
    versions_old: list[str] = field(default_factory=list)
    versions_removed: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return _node_dict(self)


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions a node keeps: ``keep`` newest (the delivered one counted), and ``protect``."""

    keep: int = KEEP
    protect: tuple[str, ...] = ()
    prune: bool = False


@dataclass(frozen=True)
class ModelPlan:
    """Where one model's files go."""

    model: str
    source: Path | None
    dest: str | None
    nodes: tuple[str, ...]
    skipped: str | None = None
    #: the nodes serving it that ``--limit`` left out
    limited_out: tuple[str, ...] = ()


def node_dest(spec: ModelSpec) -> str:
    """The model's directory on each node: ``<node_dir>/<hf_model_dir below mount_path>``; its versions
    are ``<that>@<id>`` beside it."""
    return spec.node_dest


def serving_nodes(inventory: Inventory, spec: ModelSpec) -> list[str]:
    """GPU nodes the Deployment can land on: the model's GPU product and at least TP x PP GPUs."""
    out = []
    for node in inventory.nodes:
        gpus = inventory.gpus_of(node)
        gpu = GPU_TYPES.get(gpus.type) if gpus.type else None
        if gpu and gpu.label == spec.deployment.gpu_product and gpus.count >= spec.world_size:
            out.append(node.hostname)
    return out


def plan_model(inventory: Inventory, spec: ModelSpec, limit: Collection[str] | None = None) -> ModelPlan:
    """Where ``spec``'s files would go, or why rackctl delivers nothing for it; ``limit``: only to these nodes
    (``--limit``), the model skipped when none of its serving nodes is among them."""
    storage = spec.deployment.storage
    if storage.kind == "nfs":
        return ModelPlan(spec.name, None, None, (), "on the NFS export (mounted read-only; rackctl never writes it)")
    serving = tuple(serving_nodes(inventory, spec))
    nodes = serving if limit is None else tuple(n for n in serving if n in limit)
    out = tuple(n for n in serving if n not in nodes)
    if not spec.source_dir:
        placed = "no source_dir: the files must be on the nodes already"
        return ModelPlan(spec.name, None, node_dest(spec), nodes, placed, out)
    why = f"none of the nodes serving it ({', '.join(out)}) is in --limit" if out and not nodes else None
    return ModelPlan(spec.name, Path(spec.source_dir), node_dest(spec), nodes, why, out)


def check_limit(plans: list[ModelPlan], limit: Collection[str]) -> None:
    """Refuse (exit 2) a ``--limit`` that leaves no model a node to go to: it would copy nothing."""
    serving = sorted({n for p in plans for n in p.limited_out})
    if any(p.nodes for p in plans) or not serving:
        return
    fix = f"select a node serving a model: {', '.join(serving)}"
    raise InvalidInput(
        "--limit selects no node that serves a model; nothing to copy",
        problems=[Problem("--limit", f"{', '.join(limit)} serve(s) none of the chosen models", fix)],
    )


def check_before_copy(specs: list[ModelSpec], plans: list[ModelPlan]) -> None:
    """Refuse (exit 2) when any model's files do not fit its declaration or it has no node to go to."""
    problems: list[Problem] = []
    for spec, plan in zip(specs, plans, strict=True):
        if plan.source is None or plan.skipped:
            continue
        problems += check_files(spec, plan.source)
        if not plan.nodes:
            problems.append(
                Problem(
                    f"models[{spec.name}].deployment.gpu_product",
                    f"no node in the inventory has {spec.world_size} {spec.deployment.gpu_product} GPUs",
                    "pin the model to a GPU product the inventory's nodes carry",
                )
            )
    if problems:
        raise InvalidInput(f"{len(problems)} problem(s) with the model files; nothing was copied", problems=problems)


def ssh_command(access: NodeAccess, remote: list[str]) -> list[str]:
    """``ssh`` to ``access`` as every in-band connection does (pinned known_hosts, admin key, proxy)."""
    if access.address is None:
        raise RackctlError(f"{access.hostname} has no address to reach it on")
    cmd = ["ssh", "-p", str(access.port), *access.ssh_options(), "-o", "BatchMode=yes"]
    if access.private_key:
        cmd += ["-i", str(access.private_key), "-o", "IdentitiesOnly=yes"]
    sudo = [] if access.user == "root" else ["sudo", "-n"]
    return [*cmd, f"{access.user}@{access.address}", "--", shlex.join([*sudo, "python3", "-c", AGENT, *remote])]


class _Session:
    """One agent session on a node: its scan, then frames sent and replies read."""

    def __init__(self, access: NodeAccess, dest: str) -> None:
        self.proc = subprocess.Popen(  # argv from ssh_command, no local shell
            ssh_command(access, [dest]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.stdin: IO[bytes] = self.proc.stdin
        first = self.proc.stdout.readline()
        if not first:
            raise RackctlError(f"ssh {access.hostname}: {self._stderr() or 'no answer from the node'}")
        self.scan: dict[str, Any] = json.loads(first)
        self.replies: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _stderr(self) -> str:
        self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace").strip()[-500:]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.append(json.loads(line))

    def remove(self, rel: str) -> None:
        self.stdin.write(json.dumps({"rel": rel, "remove": True}).encode() + b"\n")

    def send(self, source: Path, item: SourceFile, offset: int, node: str, progress: Progress) -> int:
        header = {"rel": item.rel, "offset": offset, "size": item.size, "sha256": item.sha256}
        self.stdin.write(json.dumps(header).encode() + b"\n")
        sent = 0
        with (source / item.rel).open("rb") as f:
            f.seek(offset)
            while block := f.read(CHUNK):
                self.stdin.write(block)
                sent += len(block)
                progress(node, len(block))
        self.stdin.flush()
        return sent

    def finish(self) -> list[dict[str, Any]]:
        self.stdin.close()
        code = self.proc.wait()
        self.reader.join()
        if code != 0:
            assert self.proc.stderr is not None
            raise RackctlError(f"the node's copy exited {code}: {self.proc.stderr.read().decode(errors='replace')}")
        return self.replies

    def abort(self) -> None:
        """End the session: what was handed to ssh still reaches the node (kept there as the part of the file
        in flight, for the next run to resume); killed if it does not end within a minute."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _round(
    access: NodeAccess,
    dest: str,
    source: Path,
    files: list[SourceFile],
    *,
    result: NodeDelivery,
    progress: Progress,
    prune: bool = False,
) -> tuple[list[str], dict[str, float]]:
    """One session: send what differs (and remove what the source lacks, with ``prune``; always, what came
    from the previous version); returns the files whose hash did not match on arrival, and the versions
    beside ``dest`` (id -> mtime)."""
    session = _Session(access, dest)
    try:
        held = session.scan["files"]
        parts = session.scan["parts"]
        versions: dict[str, float] = session.scan.get("versions", {})
        wanted = {item.rel for item in files}
        seeded = set(session.scan.get("seeded", ())) - wanted
        for rel in sorted(seeded):
            session.remove(rel)
        result.extra_files = sorted(rel for rel in held if rel not in wanted and rel not in seeded)
        if prune:
            for rel in result.extra_files:
                session.remove(rel)
        for item in files:
            if held.get(item.rel) == [item.size, item.sha256]:
                result.unchanged += 1
                progress(access.hostname, item.size)  # in place already: done
                continue
            offset = parts.get(item.rel, 0)
            offset = offset if 0 < offset <= item.size and item.rel not in held else 0
            if offset:
                result.resumed_from[item.rel] = offset
                progress(access.hostname, offset)
            result.sent_bytes += session.send(source, item, offset, access.hostname, progress)
            result.sent_files.append(item.rel)
        replies = session.finish()
    finally:
        session.abort()
    removed = {r["rel"] for r in replies if r.get("removed")}
    result.pruned = [rel for rel in result.extra_files if rel in removed]
    result.extra_files = [rel for rel in result.extra_files if rel not in removed]
    return [r["rel"] for r in replies if not r["ok"]], versions


def _settle(access: NodeAccess, dest: str, result: NodeDelivery, held: dict[str, float], policy: VersionPolicy) -> None:
    """Mark the delivered version the newest on the node; decide which versions stay, remove the old ones
    with ``prune``."""
    current = version_of(dest)
    if current is None:
        return
    newest_first = sorted(held, key=lambda v: held[v], reverse=True)
    kept, old = choose_versions(current, newest_first, policy.keep, policy.protect)
    proc = subprocess.run(  # argv from ssh_command, no local shell
        ssh_command(access, [dest, "--settle", *(old if policy.prune else [])]),
        capture_output=True,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RackctlError(proc.stderr.decode(errors="replace").strip()[-500:] or f"exit {proc.returncode}")
    removed = json.loads(proc.stdout)["removed"]
    result.versions_kept = kept
    result.versions_removed = [v for v in old if v in removed]
    result.versions_old = [v for v in old if v not in removed]


def deliver_node(
    access: NodeAccess,
    dest: str,
    source: Path,
    files: list[SourceFile],
    progress: Progress,
    *,
    prune: bool = False,
    policy: VersionPolicy | None = None,
) -> NodeDelivery:
    """Bring ``dest`` on one node to ``files``; a file that arrives damaged is sent again once. With
    ``prune`` the files ``dest`` holds beyond ``files`` are removed. A versioned ``dest`` (``<dir>@<id>``)
    starts from the node's newest version, and once complete is settled as the newest (``policy``: which
    older versions stay)."""
    result = NodeDelivery(access.hostname, dest, version=version_of(dest))
    try:
        bad, held = _round(access, dest, source, files, result=result, progress=progress, prune=prune)
        if bad:
            result.resent_after_mismatch = bad
            first = (result.extra_files, result.pruned)  # the retry's scan sees only the files it re-sends
            retry = [f for f in files if f.rel in bad]
            again, _ = _round(access, dest, source, retry, result=result, progress=progress)
            result.extra_files, result.pruned = first
            if again:
                result.error = f"sha256 mismatch on arrival, twice: {', '.join(again)}"
        if result.error is None:
            _settle(access, dest, result, held, policy or VersionPolicy(prune=prune))
    except (RackctlError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        result.error = str(exc)
    return result


@dataclass(frozen=True)
class PlacedCheck:
    """What one node holds where a model without ``source_dir`` expects its files."""

    node: str
    dest: str
    files: int = 0
    bytes: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return _node_dict(self)


def check_placed_node(access: NodeAccess, dest: str) -> PlacedCheck:
    """Whether ``dest`` on one node holds a model directory (a ``config.json``); reads sizes, changes nothing."""
    try:
        proc = subprocess.run(  # argv from ssh_command, no local shell
            ssh_command(access, [dest, "--list"]), capture_output=True, check=False, timeout=600
        )
        if proc.returncode != 0:
            raise RackctlError(proc.stderr.decode(errors="replace").strip()[-500:] or f"exit {proc.returncode}")
        listing = json.loads(proc.stdout)
    except (RackctlError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return PlacedCheck(access.hostname, dest, error=str(exc))
    files: dict[str, int] = listing["files"]
    found = PlacedCheck(access.hostname, dest, len(files), sum(files.values()))
    if not listing["exists"]:
        return PlacedCheck(access.hostname, dest, error=f"{dest} does not exist (set source_dir, or place the files)")
    if "config.json" not in files:
        return PlacedCheck(
            access.hostname, dest, found.files, found.bytes, f"{dest} has no config.json: not a model directory"
        )
    return found


def check_placed(plan: ModelPlan, access: dict[str, NodeAccess]) -> list[PlacedCheck]:
    """Check a model without ``source_dir`` on its nodes, in parallel."""
    if plan.dest is None or not plan.nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(len(plan.nodes), MAX_NODES_AT_ONCE)) as pool:
        futures = [pool.submit(check_placed_node, access[n], plan.dest) for n in plan.nodes]
        return [f.result() for f in futures]


class DeliveryStopped(RackctlError):
    """The run was stopped (Ctrl-C): what reached a node stays there as the part of the file in flight."""


def deliver_model(
    plan: ModelPlan,
    access: dict[str, NodeAccess],
    progress: Progress,
    files: list[SourceFile] | None = None,
    *,
    prune: bool = False,
    protect: tuple[str, ...] = (),
    keep: int = KEEP,
    stop: threading.Event | None = None,
) -> list[NodeDelivery]:
    """Deliver one planned model to its nodes, in parallel, as the version its files make
    (``<dest>@<id>``); ``keep``/``protect``/``prune``: which older versions stay (:class:`VersionPolicy`).
    Ctrl-C (or ``stop`` set) ends every node's copy at its next block, each reported stopped, the parts kept
    for the next run to resume."""
    if plan.source is None or plan.dest is None or not plan.nodes:
        return []
    listing = files if files is not None else source_files(plan.source)
    source, dest = plan.source, versioned(plan.dest, version_id(listing))
    policy = VersionPolicy(keep, protect, prune)
    stopped = stop or threading.Event()

    def guarded(node: str, done: int) -> None:
        if stopped.is_set():
            raise DeliveryStopped("stopped; the next run resumes from what reached the node")
        progress(node, done)

    # Every node at once: the threads wait on their ssh (which does the cipher work), so the CPU count of
    # this machine is no bound on them.
    pool = ThreadPoolExecutor(max_workers=min(len(plan.nodes), MAX_NODES_AT_ONCE))
    try:
        futures = [
            pool.submit(deliver_node, access[n], dest, source, listing, guarded, prune=prune, policy=policy)
            for n in plan.nodes
        ]
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        stopped.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
