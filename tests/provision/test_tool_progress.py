"""The long tools' own output as progress: debootstrap's ``I:`` lines and apt's ``Get:`` lines become a few
stamped progress lines (each new phase, then every 25th item), so an image or mirror build is never silent
for minutes.

debootstrap itself needs root and an archive: here a **STAND-IN** ``debootstrap`` on PATH prints its
messages through debootstrap's own ``info`` function (``/usr/share/debootstrap/functions``, the same
formats, on the same descriptor as the real one), makes the root directory and exits; the rest
(``debootstrap_tree``, the streaming, the CLI's ``phases``) is the product's.
"""

from __future__ import annotations

import io
import re
import stat
from pathlib import Path

import pytest
from rich.console import Console

from bootstrap.cli import common
from bootstrap.errors import RackctlError
from bootstrap.provision.image import debootstrap_tree
from bootstrap.tool_progress import apt_download_line

FUNCTIONS = Path("/usr/share/debootstrap/functions")
STANDIN = """#!/bin/sh
exec 4>&1
. {functions}
target="$4"
info RELEASESIG "Checking Release signature"
for n in $(seq 1 60); do info RETRIEVING "Retrieving %s %s" "pkg$n" "1.$n"; done
for n in $(seq 1 60); do info VALIDATING "Validating %s %s" "pkg$n" "1.$n"; done
info INSTCORE "Installing core packages..."
info UNPACKREQ "Unpacking required packages..."
info CONFREQ "Configuring required packages..."
info BASESUCCESS "Base system installed successfully."
[ -n "$FAIL" ] && {{ echo "E: Couldn't download packages: pkg7" >&2; exit 1; }}
mkdir -p "$target"
"""

pytestmark = pytest.mark.skipif(not FUNCTIONS.exists(), reason="debootstrap not installed")


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=buffer, force_terminal=False, width=80))
    return buffer


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "debootstrap"
    tool.write_text(STANDIN.format(functions=FUNCTIONS))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    return tmp_path


def test_debootstrap_phases_and_every_25th_package_are_stamped_lines(standin: Path, stderr: io.StringIO) -> None:
    with common.phases("building the OS image") as step:
        tree = debootstrap_tree("bookworm", "http://archive.invalid/debian", standin / "cache", step, packages=("a",))
    assert tree.is_dir() and (tree / ".rackctl-complete").exists()
    lines = stderr.getvalue().splitlines()
    assert all(re.match(r"^\[\d+:\d\d\] ", line) for line in lines), lines
    said = [re.sub(r"^\[\d+:\d\d\] ", "", line) for line in lines]
    assert said == [
        "building the OS image",
        "debootstrap bookworm with 1 packages (minutes; cached after)",
        "debootstrap: Checking Release signature",
        "debootstrap: Retrieving pkg1 1.1",
        "debootstrap: Retrieving pkg25 1.25 (25)",
        "debootstrap: Retrieving pkg50 1.50 (50)",
        "debootstrap: Validating pkg1 1.1",
        "debootstrap: Validating pkg25 1.25 (25)",
        "debootstrap: Validating pkg50 1.50 (50)",
        "debootstrap: Installing core packages...",
        "debootstrap: Unpacking required packages...",
        "debootstrap: Configuring required packages...",
        "debootstrap: Base system installed successfully.",
        "done",
    ]


def test_a_failed_debootstrap_says_what_it_printed_last(standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL", "1")
    seen: list[str] = []
    with pytest.raises(RackctlError) as caught:
        debootstrap_tree("bookworm", "http://archive.invalid/debian", standin / "cache", seen.append, packages=("a",))
    assert "exit 1" in caught.value.message and "Couldn't download packages: pkg7" in caught.value.message
    assert seen[-1] == "debootstrap: Base system installed successfully."  # it was shown as it went
    assert not list((standin / "cache" / "image").glob("rootfs-*"))  # nothing half-made is kept as the tree


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("Get:1 http://deb.debian.org/debian bookworm/main amd64 libacl1 amd64 2.3.1-3 [31.3 kB]", "libacl1 2.3.1-3"),
        ("Get:7 https://pkgs.k8s.io/core:/stable:/v1.31/deb  kubeadm 1.31.2-1.1 [11.4 MB]", "kubeadm 1.31.2-1.1"),
        ("Get:9 http://deb.debian.org/debian bookworm/main all tzdata all 2024a-0 [255 kB]", "tzdata 2024a-0"),
    ],
)
def test_apts_get_lines_name_the_package_and_version(line: str, said: str) -> None:
    assert apt_download_line(line) == ("Get", said)
    assert apt_download_line("Fetched 31.3 kB in 0s (120 kB/s)") is None
