#!/usr/bin/env python3
"""Assemble minimal OCI images (one layer, no base image) from local binaries, for a kubeadm 1.20 trial.

Each image holds the named executables under /usr/local/bin (plus, for dynamically linked ones, the
shared libraries `ldd` lists, at their own paths), an empty /tmp, PATH set, and an entrypoint. The result
is an OCI archive (`oci-archive:` for skopeo, `ctr images import` reads it too). Research/lab tool
(docs/kubernetes.md, "kubelet and kubeadm 1.20 on the lab VMs: measured"); nothing in CI runs it.

    scripts/build-kube-images.py OUT_DIR NAME:TAG=ITEM[,ITEM...] ...

ITEM is ``/path/bin`` (copied to /usr/local/bin/bin), ``/path/bin@alias`` (copied again as
/usr/local/bin/alias: multi-call binaries such as xtables-nft-multi) or ``+/some/dir`` (a directory tree
copied to the same path, e.g. iptables' extension modules). E.g.
``kube-apiserver:v1.20.2=/path/kube-apiserver etcd:3.4.13-0=/usr/bin/etcd pause:3.2=/tmp/pause``.
The first binary is the entrypoint. Writes ``OUT_DIR/<name>_<tag>.tar`` and prints one path per line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

LIB_RE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def shared_libraries(binary: Path) -> list[Path]:
    """The libraries a dynamically linked binary loads (ldd), or [] for a static one."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    return sorted({Path(m.group(1)) for m in LIB_RE.finditer(out)})


def _add(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.mode = mode
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def layer(binaries: list[Path], aliases: dict[str, Path], trees: list[Path]) -> bytes:
    """An uncompressed layer tar: binaries in /usr/local/bin, their libraries, extra trees, /tmp, /etc."""
    files: dict[str, tuple[bytes, int]] = {}
    for tree in trees:
        for item in tree.rglob("*"):
            if item.is_file():
                files[str(item.resolve()).lstrip("/")] = (item.read_bytes(), 0o755)
                for lib in shared_libraries(item):
                    files[str(lib.resolve()).lstrip("/")] = (lib.resolve().read_bytes(), 0o755)
    for alias, binary in aliases.items():
        files[f"usr/local/bin/{alias}"] = (binary.read_bytes(), 0o755)
    for binary in binaries:
        files[f"usr/local/bin/{binary.name}"] = (binary.read_bytes(), 0o755)
        for lib in shared_libraries(binary):
            files[str(lib.resolve()).lstrip("/")] = (lib.resolve().read_bytes(), 0o755)
            if lib.resolve() != lib:  # keep the name the loader asks for (symlink targets are resolved)
                files[str(lib).lstrip("/")] = (lib.resolve().read_bytes(), 0o755)
    dirs = {"tmp", "etc", "var", "var/lib", "run"}
    for path in files:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(dirs):
            _add(tar, d, None, 0o1777 if d == "tmp" else 0o755)
        _add(tar, "etc/passwd", b"root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534::/:/nonexistent\n", 0o644)
        _add(tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
        for path, (data, mode) in sorted(files.items()):
            _add(tar, path, data, mode)
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest, len(data)


def oci_archive(
    ref: str, binaries: list[Path], out: Path, aliases: dict[str, Path] | None = None, trees: list[Path] | None = None
) -> None:
    """Write an OCI image layout tar for ``ref`` (registry/name:tag) to ``out``."""
    raw = layer(binaries, aliases or {}, trees or [])
    compressed = gzip.compress(raw, mtime=0)
    blobs: dict[str, bytes] = {}
    layer_digest, layer_size = _blob(blobs, compressed)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": [f"/usr/local/bin/{binaries[0].name}"],
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
    }
    config_digest, config_size = _blob(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}
        ],
    }
    manifest_digest, manifest_size = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    tag = ref.rsplit(":", 1)[1]
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": ref},
            }
        ],
    }
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644)
        _add(tar, "index.json", json.dumps(index).encode(), 0o644)
        _add(tar, "blobs", None, 0o755)
        _add(tar, "blobs/sha256", None, 0o755)
        for digest, data in blobs.items():
            _add(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", data, 0o644)
    tmp.replace(out)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in argv[1:]:
        ref, _, bins = spec.partition("=")
        if ":" not in ref or not bins:
            print(
                f"bad image spec {spec!r}: want NAME:TAG=ITEM[,ITEM...] (run with no arguments for the syntax)",
                file=sys.stderr,
            )
            return 2
        items = bins.split(",")
        trees = [Path(i[1:]) for i in items if i.startswith("+")]
        binaries = [Path(i.split("@", 1)[0]) for i in items if not i.startswith("+")]
        aliases = {i.split("@", 1)[1]: Path(i.split("@", 1)[0]) for i in items if "@" in i}
        missing = [str(b) for b in binaries if not b.is_file()] + [str(t) for t in trees if not t.is_dir()]
        if missing:
            print(f"{ref}: no such binary {', '.join(missing)}", file=sys.stderr)
            return 2
        name, tag = ref.rsplit("/", 1)[-1].rsplit(":", 1)
        out = out_dir / f"{name}_{tag}.tar"
        oci_archive(ref, binaries, out, aliases, trees)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
