"""site_services: one setting for where every node's packages and images come from, rendered as group vars."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inband.render import render_files
from bootstrap.inventory import load_inventory
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.site_vars import site_vars

REPO = Path(__file__).resolve().parents[2]
LAB_SERVICES = """site_services:
  packages: {source: mirror, suite: bookworm, upstreams: {kubernetes: false}}
  registry:
    source: head
    # the lab issues the registry's certificate from its CA (`rackctl lab` head services)
    tls: {cert_file: ../.lab/pki/registry.pem, key_file: ../.lab/pki/registry.key, ca_file: ../.lab/pki/ca.pem}
"""


def _inventory(tmp_path: Path, services: str) -> Path:
    text = (REPO / "inventory" / "lab.yml").read_text()
    assert LAB_SERVICES in text
    path = tmp_path / "inventory" / "lab.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(LAB_SERVICES, services))
    return path


def test_the_lab_uses_the_head_nodes_mirror_and_registry() -> None:
    inv = load_inventory(REPO / "inventory" / "lab.yml")
    assert inv.site_services.packages.source == "mirror"
    assert inv.site_services.registry.source == "head"


def test_mirror_vars_carry_the_site_key_and_the_head_address(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, LAB_SERVICES))
    state = tmp_path / "state"
    before = site_vars(inv, state, None)["rackctl_package_source"]
    assert before["key"] is None  # no mirror built yet: the role refuses to run (tested there)
    MirrorLayout(state).public_key.parent.mkdir(parents=True)
    MirrorLayout(state).public_key.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\nxx\n")
    (tmp_path / ".lab" / "pki").mkdir(parents=True)
    (tmp_path / ".lab" / "pki" / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nca\n")
    got = site_vars(inv, state, None)
    head = str(inv.node("head-01").interface_on("pxe").ip)
    assert got["rackctl_package_source"] == {
        "source": "mirror",
        "uri": f"http://{head}:8081/",
        "suites": ["bookworm"],
        "components": ["main"],
        "key": "-----BEGIN PGP PUBLIC KEY BLOCK-----\nxx\n",
        "signed_by": "/etc/apt/keyrings/rackctl-site.asc",
    }
    assert got["rackctl_registry"]["address"] == f"{head}:5000"
    assert got["rackctl_registry"]["ca_pem"].startswith("-----BEGIN CERTIFICATE-----")
    files = render_files(inv, None, got)
    rendered = json.loads(files["group_vars/all/site_services.yml"].split("\n", 1)[1])
    assert rendered == got


def test_public_and_site_sources(tmp_path: Path) -> None:
    public = load_inventory(_inventory(tmp_path / "a", "site_services:\n  packages: {source: public}\n"))
    pkg = site_vars(public, tmp_path, None)["rackctl_package_source"]
    assert pkg["uri"] == "http://deb.debian.org/debian"
    assert pkg["signed_by"] == "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert pkg["key"] is None
    site_dir = tmp_path / "b"
    path = _inventory(
        site_dir,
        "site_services:\n  packages: {source: site, uri: 'http://mirror.example/debian', "
        "key_file: site.asc}\n  registry: {source: external, host: registry.example, "
        "port: 443}\n",
    )
    (path.parent / "site.asc").write_text("KEY")
    site = site_vars(load_inventory(path), tmp_path, None)
    assert site["rackctl_package_source"]["uri"] == "http://mirror.example/debian"
    assert site["rackctl_package_source"]["key"] == "KEY"
    assert site["rackctl_registry"] == {
        "source": "external",
        "host": "registry.example",
        "port": 443,
        "address": "registry.example:443",
        "ca_pem": None,
    }
    (path.parent / "site.asc").unlink()
    with pytest.raises(InvalidInput) as exc:
        site_vars(load_inventory(path), tmp_path, None)
    assert "site_services.packages.key_file" in str(exc.value.problems[0])


@pytest.mark.parametrize(
    ("services", "path", "needle"),
    [
        ("site_services:\n  packages: {source: site}\n", "site_services.packages", "needs `uri`"),
        ("site_services:\n  packages: {source: mirror, uri: 'http://x/'}\n", "site_services.packages", "remove `uri`"),
        ("site_services:\n  packages: {source: attic}\n", "site_services.packages.source", "attic"),
        ("site_services:\n  registry: {source: external}\n", "site_services.registry", "needs `host`"),
    ],
)
def test_a_wrong_setting_is_refused_naming_the_field(tmp_path: Path, services: str, path: str, needle: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        load_inventory(_inventory(tmp_path, services))
    assert exc.value.exit_code == 2
    hits = [p for p in exc.value.problems if p.path.startswith(path)]
    assert hits, exc.value.problems
    assert any(needle in p.message + p.fix for p in hits), hits
    assert all(p.fix for p in hits)


def test_images_plan_names_the_registry_the_nodes_use(tmp_path: Path) -> None:
    path = _inventory(tmp_path, LAB_SERVICES)
    out = CliRunner().invoke(
        cli,
        [
            "--env",
            "host",
            "mirror",
            "images",
            "--plan",
            "--json",
            "-i",
            str(path),
            "--state-dir",
            str(tmp_path / "state"),
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    head = load_inventory(path).node("head-01").interface_on("pxe").ip
    assert doc["applied"] is False
    assert [i["image"].rsplit(":", 1)[0] for i in doc["images"]] == [f"{head}:5000/rackctl/check"]
    assert not (tmp_path / "state" / "mirror" / "images").exists()
