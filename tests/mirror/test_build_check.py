"""`rackctl mirror build` / `check` for real: Debian's archive -> private apt -> reprepro, signed by the site key."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import stat
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.inventory.environment_checks import OperatorEnvironmentError
from bootstrap.mirror.build import build_mirror
from bootstrap.mirror.check import check_mirror, require_mirror_ready
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import build_manifest
from bootstrap.mirror.repo import repo_packages
from bootstrap.mirror.site_vars import site_vars
from tests.mirror.conftest import BuiltMirror, gpgv_with_site_key, lab_inventory_copy, mirror_roles, tools_missing

pytestmark = pytest.mark.slow


def test_the_repository_holds_the_closure_signed_by_the_site_key(built_mirror: BuiltMirror) -> None:
    layout, lock = built_mirror.layout, built_mirror.result.lock
    served = repo_packages(layout, "bookworm", ["main"])
    assert {"hello", "python3-apt", "libc6"} <= set(lock)  # requested + their dependencies
    assert served == lock  # exactly the pinned closure, nothing else
    verify = gpgv_with_site_key(layout, layout.repo / "dists/bookworm/InRelease")
    assert verify.returncode == 0, verify.stderr
    # served tree: no reprepro database or config, and a lock naming the signer
    assert sorted(p.name for p in layout.repo.iterdir()) == ["dists", "pool", "rackctl-lock.json"]
    doc = json.loads(layout.lock.read_text())
    assert doc["signed_by"] == built_mirror.result.key_fingerprint
    assert doc["packages"] == lock


def test_the_build_says_each_phase_and_its_downloads_as_they_go(built_mirror: BuiltMirror) -> None:
    """apt's own Get lines, streamed: the first package fetched and every 25th, with the count of the lock."""
    said, lock = built_mirror.said, built_mirror.result.lock
    total = len(lock)
    assert said[:2] == ["resolving the manifest with a private apt state", f"downloading {total} packages"]
    fetched = [m for m in said if re.fullmatch(rf"downloading \S+ \S+ \(\d+ of {total}\)", m)]
    assert fetched[0].endswith(f"(1 of {total})") and len(fetched) == 1 + total // 25, said
    for message in fetched:
        name, version = message.split()[1:3]
        assert lock[name] == version, message
    assert said[-1] == "building the signed repository"


def test_the_private_key_stays_private(built_mirror: BuiltMirror) -> None:
    home = built_mirror.layout.gnupg_home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    keys = list((home / "private-keys-v1.d").iterdir())
    assert keys and all(stat.S_IMODE(k.stat().st_mode) == 0o600 for k in keys)
    public = built_mirror.layout.public_key.read_text()
    assert public.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    for path in built_mirror.layout.repo.rglob("*"):
        if path.is_file() and path.suffix != ".deb":
            assert "PRIVATE KEY" not in path.read_text(errors="replace")


def test_check_passes_then_lists_every_package_a_role_would_miss(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    assert check_mirror(built_mirror.layout, built_mirror.manifest).ok
    roles = mirror_roles(tmp_path / "roles")
    (roles / "extra" / "defaults").mkdir(parents=True)
    (roles / "extra" / "defaults" / "main.yml").write_text("---\nextra_packages: [cowsay, 'hello=2.9-9']\n")
    manifest = build_manifest(built_mirror.inventory, roles)
    result = check_mirror(built_mirror.layout, manifest)
    assert not result.ok
    problems = {(p["package"], p.get("role")): p["problem"] for p in result.problems}
    assert problems == {
        ("cowsay", "extra"): "not in the repository",
        ("hello", "extra"): f"repository has {built_mirror.result.lock['hello']}, pinned 2.9-9",
    }
    # the CLI: exit 1 and the same list as JSON
    runner = CliRunner()
    out = runner.invoke(
        cli,
        [
            "mirror",
            "check",
            "--json",
            "-i",
            str(built_mirror.inventory.source),
            "--state-dir",
            str(built_mirror.layout.state_dir),
            "--roles",
            str(roles),
        ],
    )
    assert out.exit_code == 1, out.output
    doc = json.loads(out.output)
    assert doc["ok"] is False
    assert {p["package"] for p in doc["problems"]} == {"cowsay", "hello"}


def test_check_refuses_a_repository_not_signed_by_the_site_key(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    copy = MirrorLayout(tmp_path / "state")
    shutil.copytree(built_mirror.layout.root, copy.root, ignore=shutil.ignore_patterns("apt-state", "S.*"))
    inrelease = copy.repo / "dists" / "bookworm" / "InRelease"
    inrelease.write_text(inrelease.read_text().replace("Label: rackctl site mirror", "Label: rackctl site mirrox"))
    result = check_mirror(copy, built_mirror.manifest)
    assert [p["problem"].split(":")[0] for p in result.problems] == ["InRelease is not signed by the site key"]
    empty = check_mirror(MirrorLayout(tmp_path / "none"), built_mirror.manifest)
    assert not empty.ok and "no repository" in empty.problems[0]["problem"]


def test_plan_resolves_without_building(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = CliRunner().invoke(
        cli,
        [
            "mirror",
            "build",
            "--plan",
            "--json",
            "-i",
            str(built_mirror.inventory.source),
            "--state-dir",
            str(state),
            "--roles",
            str(built_mirror.roles),
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["applied"] is False
    assert doc["lock"] == built_mirror.result.lock
    assert not MirrorLayout(state).repo.exists()
    assert not MirrorLayout(state).gnupg_home.exists()


def test_a_rebuild_keeps_the_site_key_and_swaps_the_tree(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    # a state dir too deep for gpg-agent's sockets in the GnuPG home (108 bytes): gpg and reprepro still sign
    layout = MirrorLayout(tmp_path / "a-state-dir-deeper-than-a-unix-socket-path-can-be" / "state")
    assert len(str(layout.gnupg_home / "S.gpg-agent.browser")) > 108
    shutil.copytree(built_mirror.layout.root, layout.root, ignore=shutil.ignore_patterns("S.*"))
    again = build_mirror(layout, built_mirror.manifest, key_uid="unused: the key exists")
    assert again.key_fingerprint == built_mirror.result.key_fingerprint
    assert again.lock == built_mirror.result.lock
    assert not list(layout.root.glob(".build.*")) and not list(layout.root.glob(".repo.old"))


def test_a_manifest_apt_cannot_resolve_is_refused(tmp_path: Path) -> None:
    if tools_missing():
        pytest.skip(tools_missing())
    inventory_path = lab_inventory_copy(tmp_path)
    roles = tmp_path / "roles"
    (roles / "bad" / "defaults").mkdir(parents=True)
    (roles / "bad" / "defaults" / "main.yml").write_text("---\nbad_packages: [no-such-package-rackctl]\n")
    out = CliRunner().invoke(
        cli,
        [
            "mirror",
            "build",
            "--json",
            "-i",
            str(inventory_path),
            "--state-dir",
            str(tmp_path / "state"),
            "--roles",
            str(roles),
        ],
    )
    assert out.exit_code == 2, out.output
    doc = json.loads(out.output)
    assert "no-such-package-rackctl" in json.dumps(doc["errors"])
    assert not (tmp_path / "state" / "mirror" / "repo").exists()


def test_build_refuses_when_nodes_do_not_use_the_mirror(tmp_path: Path) -> None:
    path = lab_inventory_copy(tmp_path)
    text = path.read_text().replace(
        "packages: {source: mirror, suite: bookworm, upstreams: {kubernetes: false}}", "packages: {source: public}"
    )
    path.write_text(text)
    out = CliRunner().invoke(cli, ["mirror", "build", "-i", str(path), "--state-dir", str(tmp_path / "s")])
    assert out.exit_code == 2
    assert "site_services.packages.source is 'public'" in out.output


def test_a_stage_can_require_the_mirror_before_touching_nodes(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    state = built_mirror.layout.state_dir
    require_mirror_ready(built_mirror.inventory, state, built_mirror.roles)  # holds everything: no error
    roles = mirror_roles(tmp_path / "roles")
    (roles / "extra" / "defaults").mkdir(parents=True)
    (roles / "extra" / "defaults" / "main.yml").write_text("---\nextra_packages: [cowsay]\n")
    with pytest.raises(OperatorEnvironmentError) as exc:
        require_mirror_ready(built_mirror.inventory, state, roles)
    assert exc.value.exit_code == 2
    assert [str(p) for p in exc.value.problems] == [
        "mirror: cowsay: not in the repository; fix: run `rackctl mirror build` (the manifest changed)"
    ]


def test_the_head_mirror_role_gets_the_repository_as_one_archive(built_mirror: BuiltMirror) -> None:
    layout = built_mirror.layout
    server = site_vars(built_mirror.inventory, layout.state_dir, None)["rackctl_mirror_server"]
    assert server["revision"] == hashlib.sha256(layout.lock.read_bytes()).hexdigest()[:16]
    with tarfile.open(server["archive"]) as tar:
        names = set(tar.getnames())
        inrelease = tar.extractfile("dists/bookworm/InRelease")
        assert inrelease is not None and inrelease.read() == (layout.repo / "dists/bookworm/InRelease").read_bytes()
    assert {"rackctl-lock.json", "pool"} <= names
    assert server["mirror_port"] == 8081 and server["suite"] == "bookworm"
    assert server["registry_key_file"].endswith("registry.key")  # a path on the controller, never its content
