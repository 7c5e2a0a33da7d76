"""A small OCI image layout writer: gzip layers from files (and whole root trees), reproducible bytes.

Used for the images rackctl builds itself (the lab checks' busybox image): no container engine needed.
Timestamps, owners and gzip headers are fixed, so the same files give the same digests (pushes are
idempotent).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bootstrap.fsutil import swap_in

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class Entry:
    """One path in the layer: a file (``source`` copied, ``mode``), or a symlink (``link`` target)."""

    path: str
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755


def layer_tar(entries: list[Entry]) -> bytes:
    """The uncompressed layer: parent directories first, fixed metadata."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(e.path).parent) for e in entries} - {"."})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for e in sorted(entries, key=lambda x: x.path):
            info = tarfile.TarInfo(e.path)
            info.mtime, info.uid, info.gid = 0, 0, 0
            if e.link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, e.link, 0o777
                tar.addfile(info)
            else:
                assert e.source is not None
                data = e.source.read_bytes()
                info.size, info.mode = len(data), e.mode
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tree_layer(root: Path, *, empty: tuple[str, ...] = ()) -> bytes:
    """An uncompressed layer of a whole root tree as it is (modes, owners, links), times fixed, devices left
    out; ``empty``: directories (relative paths) kept without their contents (``proc``, ``var/cache``...)."""

    def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.isdev() or info.isfifo() or any(info.name.startswith(f"{d}/") for d in empty):
            return None
        info.mtime, info.uname, info.gname = 0, "", ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=fixed)
    return buf.getvalue()


def write_layout(
    out: Path,
    entries: list[Entry],
    *,
    tag: str,
    cmd: list[str],
    entrypoint: list[str] | None = None,
    env: tuple[str, ...] = ("PATH=/bin",),
    name: str = "",
    level: int = 9,
    base: tuple[bytes, ...] = (),
) -> str:
    """Write an OCI image layout with one image tagged ``tag`` to ``out`` (swapped in whole); its manifest digest.

    ``name`` (a full reference) is recorded for importers that name images from the layout (containerd's
    ``io.containerd.image.name``); ``level`` is the layers' gzip level (1 for large binaries). ``base`` are
    uncompressed layers (:func:`tree_layer`) below the one ``entries`` make.
    """
    raws = [*base, layer_tar(entries)]
    layers = [gzip.compress(raw, compresslevel=level, mtime=0) for raw in raws]
    image_config: dict[str, object] = {"Cmd": cmd, "Env": list(env)}
    if entrypoint is not None:
        image_config["Entrypoint"] = entrypoint
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": image_config,
            "rootfs": {"type": "layers", "diff_ids": [_digest(raw) for raw in raws]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config), "size": len(config)},
            "layers": [{"mediaType": LAYER_TYPE, "digest": _digest(layer), "size": len(layer)} for layer in layers],
        },
        sort_keys=True,
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST_TYPE,
                "digest": _digest(manifest),
                "size": len(manifest),
                "annotations": {
                    "org.opencontainers.image.ref.name": tag,
                    **({"io.containerd.image.name": name} if name else {}),
                },
            }
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (staging / "blobs" / "sha256").mkdir(parents=True)
        for blob in (*layers, config, manifest):
            (staging / "blobs" / "sha256" / _digest(blob).split(":", 1)[1]).write_bytes(blob)
        (staging / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        (staging / "index.json").write_text(json.dumps(index))
        swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _digest(manifest)
