"""The mirror manifest: each role declares `<role>_packages` in its defaults; the inventory adds pins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from bootstrap.mirror.manifest import build_manifest, role_requests
from bootstrap.resources import roles_dir

REPO = Path(__file__).resolve().parents[2]


def _role(root: Path, name: str, body: str) -> None:
    (root / name / "defaults").mkdir(parents=True)
    (root / name / "defaults" / "main.yml").write_text(body)


def test_each_role_lists_its_packages_in_defaults(tmp_path: Path) -> None:
    _role(tmp_path, "baseline", "---\nbaseline_packages: [chrony, unattended-upgrades]\nbaseline_other: [x]\n")
    _role(tmp_path, "runtime", "---\nruntime_packages:\n  - containerd=1.6.20~ds1-1+b1\n")
    _role(tmp_path, "quiet", "---\nquiet_enabled: true\n")
    requests = role_requests(tmp_path)
    assert [(r.role, r.name, r.version) for r in requests] == [
        ("baseline", "chrony", None),
        ("baseline", "unattended-upgrades", None),
        ("runtime", "containerd", "1.6.20~ds1-1+b1"),
    ]


def test_the_shipped_package_source_role_asks_for_python3_apt() -> None:
    names = {(r.role, r.name) for r in role_requests(roles_dir())}
    assert ("package_source", "python3-apt") in names


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("---\nbad_packages: [Not_A_Package]\n", "'Not_A_Package'"),
        ("---\nbad_packages: ['hello=1 2']\n", "'hello=1 2'"),
        ("---\nbad_packages: hello\n", "is not a list"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_role_file(tmp_path: Path, body: str, needle: str) -> None:
    _role(tmp_path, "bad", body)
    with pytest.raises(InvalidInput) as exc:
        role_requests(tmp_path)
    text = exc.value.message + " ".join(str(p) for p in exc.value.problems)
    assert needle in text
    assert "bad/defaults/main.yml" in text
    assert exc.value.exit_code == 2


def test_inventory_pins_join_the_manifest(tmp_path: Path) -> None:
    source = (REPO / "inventory" / "lab.yml").read_text()
    path = tmp_path / "lab.yml"
    path.write_text(
        source.replace(
            "upstreams: {kubernetes: false}}",
            "upstreams: {kubernetes: false}, pins: {hello: '2.10-3'}}",
        )
    )
    manifest = build_manifest(load_inventory(path), roles_dir())
    assert manifest.pinned()["hello"] == "2.10-3"
    assert manifest.pinned()["python3-apt"] is None
    assert manifest.suite == "bookworm"


def test_two_pins_of_one_package_are_refused(tmp_path: Path) -> None:
    _role(tmp_path, "a", "---\na_packages: ['hello=2.10-3']\n")
    _role(tmp_path, "b", "---\nb_packages: ['hello=2.10-2', 'hello']\n")
    inventory = load_inventory(REPO / "inventory" / "lab.yml")
    with pytest.raises(InvalidInput) as exc:
        build_manifest(inventory, tmp_path)
    assert [str(p) for p in exc.value.problems] == ["hello: pinned to 2.10-3 (a), 2.10-2 (b); fix: pin one version"]


def test_upstream_must_be_a_url(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        cli,
        [
            "mirror",
            "build",
            "--plan",
            "--json",
            "-i",
            str(REPO / "inventory" / "lab.yml"),
            "--state-dir",
            str(tmp_path),
            "--upstream",
            "deb.debian.org",
        ],
    )
    assert out.exit_code == 2
    assert json.loads(out.output)["errors"][0]["path"] == "--upstream"
