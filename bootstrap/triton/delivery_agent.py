"""The node side of model delivery: a stdlib-only script rackctl runs with ``python3 -c`` over SSH.

Protocol (one session per node): argv ``DEST``; the agent first prints one JSON line, the scan of DEST:
``{"files": {rel: [size, sha256]}, "parts": {rel: size}}`` (``parts``: interrupted copies, kept as
``.<name>.rackctl-part`` beside the file). Then it reads frames from stdin until EOF: a JSON header line
``{"rel", "offset", "size", "sha256"}`` and ``size - offset`` bytes, appended to the part file from
``offset`` (a part shorter than ``offset`` fails the check below, and the file is sent again whole); it
hashes the whole part (the bytes kept from before read once, the new ones as they arrive: the file is
not read back), renames it into place when the sha256 matches, removes it when not, and prints
``{"rel", "ok", "sha256"}``. Every received chunk is flushed, so an interrupted copy leaves its bytes.
With argv ``DEST --list`` the agent only lists what DEST holds, ``{"exists", "files": {rel: size}}``,
and changes nothing (the check of a directory placed on the nodes beforehand). A header
``{"rel", "remove": true}`` removes a file the scan found (``--prune``: a file the source no
longer has) and answers ``{"rel", "ok": true, "removed": true}``.
One session at a time per destination (``flock`` on ``.<dest>.rackctl-lock`` beside it): a session whose
client went away finishes what it had received before the next one scans.

Versions (:mod:`bootstrap.triton.weights_version`): a DEST named ``<model dir>@<id>`` is one version of the
model; its siblings ``<model dir>@<other id>`` are the others, and the lock is the model's
(``.<model dir name>.rackctl-lock``). A version directory that does not exist yet starts as hard links to
the files of the newest sibling (copies where links fail), made in ``<DEST>.rackctl-seed`` and renamed into
place: a file that did not change is found in place by the scan and not sent; a file sent replaces its link
(a new inode), so the older version keeps its bytes. The scan adds ``"seeded"`` (the files linked) and
``"versions"`` (``{id: mtime}`` of the siblings). With argv ``DEST --settle [ID...]`` the agent marks DEST
the newest version (its mtime now), removes the named sibling versions (never DEST) and prints
``{"removed": [id...]}``.
"""

from __future__ import annotations

AGENT = r"""
import fcntl, hashlib, json, os, re, shutil, sys
dest = sys.argv[1].rstrip("/")
PART = ".rackctl-part"
parent, base = os.path.split(dest)
found_version = re.match(r"^(.+)@([0-9a-f]{12})$", base)
model_base = found_version.group(1) if found_version else None
def versions():
    out = {}
    if model_base is None or not os.path.isdir(parent):
        return out
    for name in os.listdir(parent):
        m = re.match(r"^(.+)@([0-9a-f]{12})$", name)
        full = os.path.join(parent, name)
        if m and m.group(1) == model_base and full != dest and os.path.isdir(full):
            out[m.group(2)] = os.path.getmtime(full)
    return out
def lock_model():
    lock = open(os.path.join(parent, "." + (model_base or base) + ".rackctl-lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock
def seed():
    if model_base is None or os.path.exists(dest):
        return []
    held = versions()
    if not held:
        return []
    newest = os.path.join(parent, model_base + "@" + max(held, key=held.get))
    tmp = dest + ".rackctl-seed"
    shutil.rmtree(tmp, ignore_errors=True)
    linked = []
    for root, _, names in os.walk(newest):
        for name in names:
            full = os.path.join(root, name)
            if name.endswith(PART) or os.path.islink(full) or not os.path.isfile(full):
                continue
            rel = os.path.relpath(full, newest)
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            try:
                os.link(full, os.path.join(tmp, rel))
            except OSError:
                shutil.copyfile(full, os.path.join(tmp, rel))
            linked.append(rel)
    os.makedirs(tmp, exist_ok=True)
    os.rename(tmp, dest)
    return linked
def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)
def part_of(rel):
    head, name = os.path.split(rel)
    return os.path.join(dest, head, "." + name + PART)
if sys.argv[2:] == ["--list"]:
    found = {}
    for root, _, names in os.walk(dest):
        for name in names:
            full = os.path.join(root, name)
            if os.path.isfile(full) and not name.endswith(PART):
                found[os.path.relpath(full, dest)] = os.path.getsize(full)
    print(json.dumps({"exists": os.path.isdir(dest), "files": found}))
    sys.exit(0)
if sys.argv[2:3] == ["--settle"]:
    lock = lock_model()
    if os.path.isdir(dest):
        os.utime(dest)
    removed = []
    for vid in sys.argv[3:]:
        old = os.path.join(parent, model_base + "@" + vid)
        if model_base and re.match(r"^[0-9a-f]{12}$", vid) and old != dest and os.path.isdir(old):
            shutil.rmtree(old)
            removed.append(vid)
    print(json.dumps({"removed": removed}))
    sys.exit(0)
files, parts = {}, {}
os.makedirs(parent, exist_ok=True)
lock = lock_model()
seeded = seed()
os.makedirs(dest, exist_ok=True)
for root, _, names in os.walk(dest):
    for name in names:
        full = os.path.join(root, name)
        rel = os.path.relpath(full, dest)
        if name.startswith(".") and name.endswith(PART):
            parts[os.path.join(os.path.dirname(rel), name[1:-len(PART)])] = os.path.getsize(full)
        elif os.path.isfile(full) and not os.path.islink(full):
            files[rel] = [os.path.getsize(full), sha(full)]
out = sys.stdout
out.write(json.dumps({"files": files, "parts": parts, "seeded": seeded, "versions": versions()}) + "\n")
out.flush()
inp = sys.stdin.buffer
while True:
    line = inp.readline()
    if not line:
        break
    head = json.loads(line)
    rel = head["rel"]
    if rel.startswith("/") or ".." in rel.split("/"):
        sys.exit("refused path " + rel)
    if head.get("remove"):
        if rel in files:
            os.remove(os.path.join(dest, rel))
        out.write(json.dumps({"rel": rel, "ok": True, "removed": True}) + "\n")
        out.flush()
        continue
    offset, size = head["offset"], head["size"]
    part = part_of(rel)
    os.makedirs(os.path.dirname(part), exist_ok=True)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    h = hashlib.sha256()
    with open(part, "r+b" if have >= offset and offset else "w+b") as f:
        left = offset
        while left:  # the bytes kept from before: read once, to hash them
            b = f.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            left -= len(b)
        f.seek(offset)
        f.truncate()
        left = size - offset
        while left:  # what arrives is hashed as it is written: the file is not read back
            b = inp.read(min(left, 1 << 20))
            if not b:
                sys.exit(0)
            f.write(b)
            h.update(b)
            f.flush()
            left -= len(b)
        f.flush()
        os.fsync(f.fileno())
    got = h.hexdigest()
    ok = got == head["sha256"]
    if ok:
        os.replace(part, os.path.join(dest, rel))
    else:
        os.remove(part)
    out.write(json.dumps({"rel": rel, "ok": ok, "sha256": got}) + "\n")
    out.flush()
"""
