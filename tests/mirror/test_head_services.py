"""The lab's head services for real: nginx serves the signed mirror, docker-registry (TLS from the lab CA)
holds the checks' image; reached from inside a private lab namespace as nodes reach them (no VMs here)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.fsutil import atomic_write_text
from bootstrap.mirror.apt_fetch import PrivateApt, Upstream
from bootstrap.mirror.images import PushError, push_images, required_images
from bootstrap.mirror.site_vars import site_vars
from rackctl_lab.head_services import LabHeadServices, pid_alive, stop_recorded
from rackctl_lab.netns import LabNetwork
from rackctl_lab.vms import LabVms, LabVmState
from tests.mirror.conftest import BuiltMirror

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _prerequisites() -> str:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "needs root and iproute2 (network namespaces)"
    missing = [t for t in ("nginx", "skopeo") if shutil.which(t, path="/usr/sbin:/usr/bin") is None]
    if missing or not Path("/usr/bin/docker-registry").exists():
        return f"missing: {missing or ['docker-registry']} (scripts/apt-packages.txt)"
    return ""


@pytest.fixture
def served(built_mirror: BuiltMirror, tmp_path: Path) -> Iterator[tuple[LabHeadServices, LabNetwork]]:
    reason = _prerequisites()
    if reason:
        pytest.skip(reason)
    suffix = secrets.token_hex(3)
    network = LabNetwork(f"rkm-{suffix}", f"rkm{suffix}", "10.200.0.1/24")  # own names: beside any other lab
    network.up()
    services = LabHeadServices(built_mirror.inventory, built_mirror.layout.state_dir, tmp_path / ".lab", network)
    try:
        services.start()
        yield services, network
    finally:
        services.stop()
        network.down()


def _node_apt(tmp_path: Path, uri: str, key: Path) -> PrivateApt:
    """apt as a node configured by the package_source role sees it: the mirror only, its key only."""
    apt = PrivateApt(
        tmp_path / "node-apt", Upstream(archive=uri.rstrip("/"), security=None, keyring=key), "bookworm", ["main"]
    )
    apt.prepare()
    (apt.root / "sources.list").write_text(f"deb [signed-by={key}] {uri} bookworm main\n")
    return apt


def test_a_node_resolves_from_the_mirror_trusting_only_the_site_key(
    served: tuple[LabHeadServices, LabNetwork], built_mirror: BuiltMirror, tmp_path: Path
) -> None:
    services, network = served
    uri = services.mirror_uri
    assert uri == site_vars(built_mirror.inventory, built_mirror.layout.state_dir, None)["rackctl_package_source"][
        "uri"
    ].replace(str(built_mirror.inventory.node("head-01").interface_on("pxe").ip), network.ip)
    key = built_mirror.layout.public_key
    apt = _node_apt(tmp_path, uri, key)

    def run(*a):
        return subprocess.run(
            [*network.exec_prefix(), "apt-get", *apt.options(), *a],
            check=False,
            capture_output=True,
            text=True,
        )

    update = run("update")
    assert update.returncode == 0, update.stderr
    sim = run("install", "-s", "hello")
    assert f"Inst hello ({built_mirror.result.lock['hello']} rackctl" in sim.stdout, sim.stdout
    policy = subprocess.run(
        [*network.exec_prefix(), "apt-cache", *apt.options(), "policy", "hello"],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    assert uri.rstrip("/") + " bookworm/main" in policy and "deb.debian.org" not in policy
    # another key: apt refuses the mirror's Release
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    subprocess.run(
        [
            "gpg",
            "--homedir",
            str(other),
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "x <x@y>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    armored = subprocess.run(
        ["gpg", "--homedir", str(other), "--armor", "--export"], check=True, capture_output=True
    ).stdout
    subprocess.run(["gpgconf", "--homedir", str(other), "--kill", "gpg-agent"], check=False, capture_output=True)
    (tmp_path / "other.asc").write_bytes(armored)
    bad = _node_apt(tmp_path / "bad", uri, tmp_path / "other.asc")
    refused = subprocess.run(
        [*network.exec_prefix(), "apt-get", *bad.options(), "update"], check=False, capture_output=True, text=True
    )
    assert "NO_PUBKEY" in refused.stderr + refused.stdout or "not signed" in refused.stderr + refused.stdout


def test_the_registry_takes_the_checks_image_over_verified_tls(
    served: tuple[LabHeadServices, LabNetwork], built_mirror: BuiltMirror
) -> None:
    services, network = served
    registry = site_vars(built_mirror.inventory, built_mirror.layout.state_dir, None)["rackctl_registry"]
    registry["address"] = services.registry_address  # the lab's head address (no `lab up` record here)
    assert registry["ca_pem"].startswith("-----BEGIN CERTIFICATE-----")  # the lab CA the lab wrote for the inventory
    wrap = lambda argv: [*network.exec_prefix(), *argv]  # noqa: E731
    first = push_images(built_mirror.layout, required_images(built_mirror.inventory), registry, wrap=wrap)
    again = push_images(built_mirror.layout, required_images(built_mirror.inventory), registry, wrap=wrap)
    assert [r["ok"] for r in first] == [True] and first == again  # reproducible image, same digest
    index = json.loads((built_mirror.layout.images / "rackctl_check" / "index.json").read_text())
    assert index["manifests"][0]["digest"] == first[0]["registry_digest"]
    # without the lab CA the registry's certificate is not trusted
    with pytest.raises(PushError, match="certificate"):
        push_images(
            built_mirror.layout, required_images(built_mirror.inventory), {**registry, "ca_pem": None}, wrap=wrap
        )


def test_lab_serve_runs_detached_and_stops_by_recorded_pid(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    reason = _prerequisites()
    if reason:
        pytest.skip(reason)
    suffix = secrets.token_hex(3)
    network = LabNetwork(f"rkm-{suffix}", f"rkm{suffix}", "10.200.0.1/24")
    lab_dir = tmp_path / ".lab"
    network.up()
    # what `rackctl lab up` records about its network (no VMs are needed to serve)
    atomic_write_text(LabVms(lab_dir).state_path, LabVmState(network.name, network.bridge, network.address).to_json())
    args = ["--lab-dir", str(lab_dir), "--json"]
    runner = CliRunner()
    try:
        up = runner.invoke(
            cli,
            [
                "lab",
                "serve",
                "up",
                "-i",
                str(built_mirror.inventory.source),
                "--state-dir",
                str(built_mirror.layout.state_dir),
                *args,
            ],
        )
        assert up.exit_code == 0, up.output
        doc = json.loads(up.output)
        assert doc["mirror"] == "http://10.200.0.1:8081/" and doc["registry"] == "10.200.0.1:5000"
        fetch = [
            *network.exec_prefix(),
            "python3",
            "-c",
            "import urllib.request as u,sys;sys.stdout.write(u.urlopen(sys.argv[1]).read().decode())",
            doc["mirror"] + "rackctl-lock.json",
        ]
        served = subprocess.run(fetch, capture_output=True, text=True, check=True).stdout
        assert json.loads(served)["packages"] == built_mirror.result.lock  # still serving after the command ended
        status = json.loads(runner.invoke(cli, ["lab", "serve", "status", *args]).output)
        assert status["services"] == doc["pids"] and all(status["services"].values())
        down = json.loads(runner.invoke(cli, ["lab", "serve", "down", *args]).output)
        assert down["stopped"] == doc["pids"]
        assert not any(pid_alive(pid) for pid in doc["pids"].values())
    finally:
        stop_recorded(lab_dir)
        network.down()
