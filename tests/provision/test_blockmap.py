"""Block maps: which ranges of an image are mapped, and the deploy ramdisk's own range writer.

The writer tests run the functions of the real ``/init`` (``zero_holes``, ``write_ranges``) with the real
busybox-static and util-linux ``fallocate`` on this machine, against a file standing in for the node's disk
(the installed lab, ``test_e2e_lab``, runs the same code on its VMs' virtio disks).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bootstrap.provision.blockmap import (
    BLOCK_SIZE,
    MAP_VERSION,
    BlockMap,
    build_block_map,
    ensure_block_map,
    map_path,
    mapped_ranges,
    ranges_path,
    split_runs,
)
from bootstrap.provision.ramdisk import _asset

MIB = 1 << 20
#: what the "reused" node disk holds before the writer runs
OLD_BYTE = b"\xaa"


def _raw(folder: Path) -> Path:
    """An 8 MiB "disk": data at 0, a partial block at 1 MiB + 100, 2 MiB of data at 4 MiB, data in the last block."""
    raw = folder / "disk.raw"
    data = bytearray(8 * MIB)
    data[0:512] = os.urandom(512)
    data[MIB + 100 : MIB + 200] = b"x" * 100
    data[4 * MIB : 6 * MIB] = os.urandom(2 * MIB)
    data[-10:] = b"backup-gpt"
    raw.write_bytes(bytes(data))
    return raw


def test_mapped_ranges_are_the_runs_of_non_zero_blocks(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    last = 8 * MIB - BLOCK_SIZE
    assert mapped_ranges(raw) == [(0, BLOCK_SIZE), (MIB, BLOCK_SIZE), (4 * MIB, 2 * MIB), (last, BLOCK_SIZE)]
    assert mapped_ranges(raw, block_size=MIB) == [(0, 2 * MIB), (4 * MIB, 2 * MIB), (7 * MIB, MIB)]


def test_map_text_round_trips_and_holes_cover_the_rest(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    bmap = build_block_map(raw, image)
    assert BlockMap.from_text(map_path(image).read_text()) == bmap
    pieces = sorted([(r.offset, r.length) for r in bmap.ranges] + bmap.holes())
    assert pieces[0][0] == 0 and sum(length for _, length in pieces) == raw.stat().st_size
    assert all(a + la == b for (a, la), (b, _) in itertools.pairwise(pieces))  # contiguous, no overlap
    assert bmap.mapped_bytes == 2 * MIB + 3 * BLOCK_SIZE
    assert (bmap.version, bmap.codec) == (MAP_VERSION, "zstd") and bmap.current
    # the ranges stream is the zstd frames, in order, each with the length and digest the map gives it
    stream = ranges_path(image).read_bytes()
    assert len(stream) == bmap.stream_bytes
    pos = 0
    for r in bmap.ranges:
        member = stream[pos : pos + r.packed_length]
        assert hashlib.sha256(member).hexdigest() == r.packed_sha256
        assert _unzstd(member) == raw.read_bytes()[r.offset : r.offset + r.length]
        pos += r.packed_length


def test_ensure_builds_the_map_from_the_gzipped_image_once(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    image.write_bytes(gzip.compress(raw.read_bytes()))
    first = ensure_block_map(image)
    assert first.image_size == 8 * MIB and len(first.ranges) == 4
    stamp = map_path(image).stat().st_mtime_ns
    assert ensure_block_map(image) == first and map_path(image).stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work files left behind


def test_a_map_of_gzip_members_from_before_version_2_is_rebuilt_as_zstd_frames(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    image.write_bytes(gzip.compress(raw.read_bytes()))
    # what a cache built before version 2 holds: no codec line, gzip members (the ramdisk refuses such a map)
    old = "# rackctl-bmap 1: ranges are gzip members of the .ranges stream, in this order\n"
    old += f"image_size {8 * MIB}\nblock_size {BLOCK_SIZE}\nrange 0 {8 * MIB} 10 {'0' * 64}\n"
    map_path(image).write_text(old)
    ranges_path(image).write_bytes(b"0123456789")
    assert not BlockMap.from_text(old).current and BlockMap.from_text(old).codec == "gzip"
    bmap = ensure_block_map(image)
    assert bmap.current and len(bmap.ranges) == 4
    assert "codec zstd" in map_path(image).read_text().splitlines()
    first = bmap.ranges[0]
    assert _unzstd(ranges_path(image).read_bytes()[: first.packed_length]) == raw.read_bytes()[: first.length]


def _unzstd(frame: bytes) -> bytes:
    """Decompress one zstd frame with the zstd CLI (the tool the ramdisk runs)."""
    return subprocess.run(["zstd", "-q", "-dc"], input=frame, capture_output=True, check=True).stdout


# -- the ramdisk's writer, run by busybox on this machine -----------------------------------------------------
def _writer_script(bmap: Path, stream: Path, disk: Path, size: int) -> str:
    init = _asset("init").decode()
    helpers = "".join(
        re.search(rf"^{name}\(\) {{ .* }}.*\n", init, re.M).group(0)  # type: ignore[union-attr]
        for name in ("log", "cs", "secs")
    )
    functions = helpers + "".join(
        re.search(rf"^{name}\(\) {{.*?^}}\n", init, re.M | re.S).group(0)  # type: ignore[union-attr]
        for name in ("zero_holes", "write_ranges")
    )
    return (
        "set -o pipefail\n"
        f"disk={disk}; R_size={size}; disk_bytes=$(stat -c %s {disk})\n"
        'fail() { echo "FAIL: $*"; exit 3; }\n'
        + functions.replace("/tmp/", f"{disk.parent}/t-")
        + f"cp {bmap} {disk.parent}/t-bmap\n"
        + f"zero_holes\ncat {stream} | write_ranges\n"
        + f"cat {disk.parent}/t-ranges.done 2>/dev/null || {{ cat {disk.parent}/t-ranges.err; exit 4; }}\n"
    )


def _run_writer(tmp_path: Path, image: Path, stream: Path, disk_size: int) -> subprocess.CompletedProcess[str]:
    for tool in ("/bin/busybox", "/usr/bin/fallocate"):
        if not Path(tool).exists():
            pytest.skip(f"{tool} is not installed")
    disk = tmp_path / "node-disk"
    with disk.open("wb") as fh:  # a reused disk: old data everywhere, also where the image has zeros
        fh.write(OLD_BYTE * disk_size)
    size = BlockMap.from_text(map_path(image).read_text()).image_size
    script = _writer_script(map_path(image), stream, disk, size)
    return subprocess.run(
        ["/bin/busybox", "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


def test_ramdisk_writer_makes_a_reused_disk_read_exactly_as_the_image(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    bmap = build_block_map(raw, image)
    done = _run_writer(tmp_path, image, ranges_path(image), 10 * MIB)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].split() == [str(len(bmap.ranges)), str(bmap.mapped_bytes)]
    # the writer says where its time went (the bench prints it per node)
    figures = r"rackctl-ramdisk: ranges: receive \d+\.\d\ds, sha256 \d+\.\d\ds, decompress \+ write \d+\.\d\ds"
    assert re.search(figures, done.stdout), done.stdout
    written = (tmp_path / "node-disk").read_bytes()
    assert written[: 8 * MIB] == raw.read_bytes()  # holes zeroed, ranges in place
    assert written[-MIB:] == bytes(MIB)  # stale signatures at the disk's end are gone


def test_a_corrupt_range_fails_the_write_naming_the_range(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    bmap = build_block_map(raw, image)
    # a bit flipped in transit inside range 3's zstd frame
    stream = ranges_path(image).read_bytes()
    start = sum(r.packed_length for r in bmap.ranges[:2])
    member = bytearray(stream[start : start + bmap.ranges[2].packed_length])
    member[len(member) // 2] ^= 0xFF
    flipped = tmp_path / "flipped.ranges"
    flipped.write_bytes(stream[:start] + bytes(member) + stream[start + len(member) :])
    done = _run_writer(tmp_path, image, flipped, 10 * MIB)
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"range 3 (bytes {4 * MIB}+{2 * MIB})" in done.stdout, done.stdout
    # checked before it is written: not a byte of the corrupt frame reached the disk
    assert (tmp_path / "node-disk").read_bytes()[4 * MIB : 6 * MIB] == OLD_BYTE * (2 * MIB)
    # a frame that decompresses fine but is not the one the map names: only its digest can tell
    text = map_path(image).read_text()
    map_path(image).write_text(text.replace(bmap.ranges[1].packed_sha256, "0" * 64))
    done = _run_writer(tmp_path, image, ranges_path(image), 10 * MIB)
    assert done.returncode == 4 and "range 2 " in done.stdout and "sha256 mismatch" in done.stdout, done.stdout


def test_bytes_after_the_last_range_fail_the_write(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    build_block_map(raw, image)
    longer = tmp_path / "longer.ranges"
    shutil.copyfile(ranges_path(image), longer)
    with longer.open("ab") as fh:
        fh.write(b"trailing")
    done = _run_writer(tmp_path, image, longer, 10 * MIB)
    assert done.returncode == 4 and "bytes after its last range" in done.stdout, done.stdout


def test_long_runs_are_split_so_that_a_range_fits_in_the_ramdisks_memory(tmp_path: Path) -> None:
    assert split_runs([(0, 4096), (MIB, 5 * MIB)], 2 * MIB) == [
        (0, 4096),
        (MIB, 2 * MIB),
        (3 * MIB, 2 * MIB),
        (5 * MIB, MIB),
    ]
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    bmap = build_block_map(raw, image, max_range=MIB)
    assert [(r.offset, r.length) for r in bmap.ranges if r.offset >= 4 * MIB][:2] == [(4 * MIB, MIB), (5 * MIB, MIB)]
    assert max(r.length for r in bmap.ranges) == MIB
    done = _run_writer(tmp_path, image, ranges_path(image), 10 * MIB)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "node-disk").read_bytes()[: 8 * MIB] == raw.read_bytes()


def test_a_stream_that_ends_inside_a_frame_fails_naming_the_range(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    image = tmp_path / "disk.raw.gz"
    bmap = build_block_map(raw, image)
    short = tmp_path / "short.ranges"
    cut = sum(r.packed_length for r in bmap.ranges[:2]) + 10
    short.write_bytes(ranges_path(image).read_bytes()[:cut])
    done = _run_writer(tmp_path, image, short, 10 * MIB)
    assert done.returncode == 4, done.stdout + done.stderr
    want = f"range 3 (bytes {4 * MIB}+{2 * MIB}): the stream ended after 10 of its {bmap.ranges[2].packed_length} bytes"
    assert want in done.stdout, done.stdout
