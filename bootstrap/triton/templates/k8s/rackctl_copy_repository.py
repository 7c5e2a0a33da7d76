"""rackctl repository copier (an initContainer; shipped in the launcher ConfigMap). Python 3 stdlib only.

Copies the model repository the kubelet projected from the ``<model>-repository`` ConfigMap (``--source``:
``rackctl-repository.json`` = {digest, files, dirs}, the files under ``repository/``) to ``--dest``:

- the projected files are read and their digest checked against the manifest (a ConfigMap caught mid-update
  is refused, the pod restarts and reads it again);
- ``--dest`` already holding that digest (its ``.rackctl-repository-digest`` marker): nothing is written;
- otherwise the tree (files, the empty version directories, the marker) is written to a temporary directory
  beside ``--dest``, renamed to ``.<name>-<digest>``, and ``--dest`` -- a relative symlink -- is switched to it
  with one ``rename``: Triton sees the old repository or the new one, never a mix. The previous tree is
  removed only after the switch. A plain directory found at ``--dest`` (copied by hand) is moved aside first
  and removed after the switch.

Exit 0 with one JSON line on stdout (``{"dest", "digest", "changed", ...}``); exit 1 with the reason on stderr.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

MANIFEST = "rackctl-repository.json"
TREE = "repository"
MARKER = ".rackctl-repository-digest"


def repository_digest(files, dirs):
    """sha256 over every (path, content) and every directory, in path order (rackctl computes the same)."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        data = files[rel]
        digest.update(b"file\0" + rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    for rel in sorted(dirs):
        digest.update(b"dir\0" + rel.encode() + b"\0")
    return digest.hexdigest()


class CopyFailed(Exception):
    pass


def _safe(rel):
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise CopyFailed(f"unsafe path {rel!r} in {MANIFEST}")
    return rel


def read_source(source):
    """(digest, files, dirs) of the projected ConfigMap, checked against its manifest."""
    try:
        with open(os.path.join(source, MANIFEST), encoding="utf-8") as fh:
            manifest = json.load(fh)
        files = {}
        for rel in manifest["files"]:
            with open(os.path.join(source, TREE, _safe(rel)), "rb") as fh:
                files[rel] = fh.read()
    except (OSError, ValueError, KeyError) as exc:
        raise CopyFailed(f"cannot read the projected repository under {source}: {exc}") from exc
    dirs = [_safe(d) for d in manifest.get("dirs", [])]
    found = repository_digest(files, dirs)
    if found != manifest.get("digest"):
        raise CopyFailed(
            f"the projected files (digest {found}) do not match {MANIFEST} (digest {manifest.get('digest')}): "
            "the ConfigMap changed while the pod started; the pod's restart reads it again"
        )
    return found, files, dirs


def installed_digest(path):
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_tree(root, digest, files, dirs):
    for rel in dirs:
        os.makedirs(os.path.join(root, rel), mode=0o755, exist_ok=True)
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(path, 0o644)
    with open(os.path.join(root, MARKER), "w", encoding="utf-8") as fh:
        fh.write(digest + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(root, 0o755)  # noqa: S103 - Triton (any uid) reads the repository; nothing in it is secret


def build_target(parent, name, digest, files, dirs):
    """``<parent>/.<name>-<digest>``, complete with its marker (built now unless a pod built it already)."""
    target = os.path.join(parent, f".{name}-{digest}")
    if installed_digest(target) == digest:
        return target
    staging = tempfile.mkdtemp(prefix=f".{name}-tmp-", dir=parent)
    try:
        _write_tree(staging, digest, files, dirs)
        os.rename(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if installed_digest(target) != digest:  # not another pod's complete copy: a real failure
            raise
    return target


def switch(dest, target):
    """Point ``dest`` at ``target`` with one rename; return the tree it replaced (or None)."""
    parent, name = os.path.split(dest)
    previous = None
    if os.path.islink(dest):
        previous = os.path.join(parent, os.readlink(dest))
    elif os.path.isdir(dest):
        previous = tempfile.mkdtemp(prefix=f".{name}-previous-", dir=parent)
        os.rename(dest, os.path.join(previous, name))
    elif os.path.lexists(dest):
        raise CopyFailed(f"{dest} exists and is neither a directory nor rackctl's symlink: move it away")
    link = os.path.join(parent, f".{name}-link-{os.getpid()}")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.basename(target), link)  # relative: the volume is mounted elsewhere on the node
    os.replace(link, dest)
    _fsync_dir(parent)
    return previous


def install(source, dest):
    """Copy the projected repository at ``source`` to ``dest`` unless ``dest`` holds its digest already."""
    digest, files, dirs = read_source(source)
    dest = os.path.abspath(dest)
    result = {"dest": dest, "digest": digest, "files": len(files), "dirs": len(dirs)}
    if installed_digest(dest) == digest:
        return {**result, "changed": False}
    parent, name = os.path.split(dest)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    target = build_target(parent, name, digest, files, dirs)
    previous = switch(dest, target)
    removed = None
    if previous and os.path.realpath(previous) != os.path.realpath(target):
        previous = os.path.normpath(previous)
        if os.path.dirname(previous) == parent and os.path.basename(previous).startswith(f".{name}-"):
            shutil.rmtree(previous, ignore_errors=True)
            removed = previous
    return {**result, "changed": True, "target": target, "removed": removed}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="where the repository ConfigMap is mounted")
    parser.add_argument("--dest", required=True, help="the model repository path Triton loads")
    args = parser.parse_args()
    try:
        result = install(args.source, args.dest)
    except (CopyFailed, OSError) as exc:
        print(f"rackctl repository copy to {args.dest} failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
