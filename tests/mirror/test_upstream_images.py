"""Air-gapped sites: the upstream images the cluster pulls, derived from the inventory and imported into the
head node's registry from archives (`rackctl mirror images --plan/--from`).

The list is checked on the real inventory loader. The import runs for real: `rackctl mirror images` inside a
private network namespace (as on the head node, `--env host`), real skopeo, the real docker-registry with TLS
from the lab CA. The real upstream images (CUDA, Triton, ...: gigabytes from nvcr.io) cannot be had offline:
each archive here is a STAND-IN, a small image written by rackctl's own OCI layout writer (`oci.py`) and saved
by skopeo under the upstream image's archive name, as the documented `skopeo copy docker://REF
oci-archive:DIR/NAME.tar` would save the real one. The node's side runs for real too: containerd, configured
by role container_runtime's own hosts.toml template, fetches an imported image by its upstream name.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from bootstrap.cluster.gpu_operator import driver_image
from bootstrap.cluster.vip import kube_vip_upstream
from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from bootstrap.inventory.trtllm import version_info
from bootstrap.mirror.kubeadm_images import control_plane_images
from bootstrap.mirror.oci import Entry, write_layout
from bootstrap.mirror.site_vars import site_vars
from bootstrap.mirror.upstream_images import UpstreamImage, registry_path, upstream_images
from bootstrap.validation.workloads import CUDA_IMAGE, NCCL_IMAGE
from rackctl_lab.head_services import LabHeadServices
from rackctl_lab.netns import LabNetwork
from tests.mirror.conftest import lab_inventory_copy

REPO = Path(__file__).resolve().parents[2]
TRITON_IMAGE = version_info("1.1.0").image  # the lab inventory's model


def _edited_lab(folder: Path, edit: Any) -> Path:
    """``inventory/lab.yml`` copied into ``folder`` and changed by ``edit(document)``."""
    path = lab_inventory_copy(folder)
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _without_sxm(doc: dict[str, Any]) -> None:
    """Drop the XE9680 (8 x H100 SXM) node: the L40S node is left, PCIe only."""
    doc["nodes"] = [n for n in doc["nodes"] if n["model"] != "XE9680"]
    doc["credentials"].pop("lab-gpu-02")


# -- the list, derived from the inventory ------------------------------------------------------------------
def test_the_lab_inventory_needs_each_pinned_upstream_image_once(tmp_path: Path) -> None:
    inv = load_inventory(lab_inventory_copy(tmp_path))
    images = {i.ref: i for i in upstream_images(inv)}
    driver = driver_image(inv)
    # profile current's driver; the suffix NVIDIA publishes for the inventory's OS (profile current: ubuntu-24.04)
    assert driver == "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04"
    cluster = [i.ref for i in control_plane_images(inv)]  # containerd's sandbox image is kubeadm's pause: once
    assert list(images) == [*cluster, kube_vip_upstream(inv), driver, CUDA_IMAGE, NCCL_IMAGE, TRITON_IMAGE]
    pause = images["registry.k8s.io/pause:3.10.2"]  # kubeadm 1.37.2's pin
    assert pause.needed_by[-1] == "container_runtime: containerd's sandbox (pause) image of every pod"
    assert images[NCCL_IMAGE].path == "nvidia/cuda-dl-base:24.11-cuda12.6-devel-ubuntu24.04"  # what containerd asks
    assert images[CUDA_IMAGE].archive == "nvcr.io_nvidia_cuda_12.2.2-base-ubuntu22.04.tar"
    assert images[CUDA_IMAGE].pin == "tag 12.2.2-base-ubuntu22.04"
    assert images[TRITON_IMAGE].needed_by == ("triton: model llama-3-8b",)
    assert images[CUDA_IMAGE].save_command("/media/images") == (
        "skopeo --override-os linux --override-arch amd64 copy docker://nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04 "
        "oci-archive:/media/images/nvcr.io_nvidia_cuda_12.2.2-base-ubuntu22.04.tar"
    )


def test_only_the_images_that_apply(tmp_path: Path) -> None:
    """No SXM node: no NCCL image. Host driver: no driver image. No models: no Triton. keepalived: no kube-vip.
    kube-vip under kubernetes.image_repository: imported where the static pod names it."""
    no_sxm = load_inventory(_edited_lab(tmp_path / "a", _without_sxm))
    refs = [i.ref for i in upstream_images(no_sxm)]
    assert NCCL_IMAGE not in refs and CUDA_IMAGE in refs

    def host_driver_no_models(doc: dict[str, Any]) -> None:
        doc["nvidia"] = {"profiles": {m: {"driver": "host"} for m in ("R760xa", "XE9680")}}
        doc["models"] = []
        doc["kubernetes"] = {"api_endpoint": "keepalived-haproxy"}

    bare = load_inventory(_edited_lab(tmp_path / "b", host_driver_no_models))
    assert driver_image(bare) is None
    cluster = [i.ref for i in control_plane_images(bare)]
    assert [i.ref for i in upstream_images(bare)] == [*cluster, CUDA_IMAGE, NCCL_IMAGE]

    def own_repository(doc: dict[str, Any]) -> None:
        doc["kubernetes"] = {"image_repository": "10.200.0.11:5000/k8s"}

    moved = load_inventory(_edited_lab(tmp_path / "c", own_repository))
    vip = next(i for i in upstream_images(moved) if "kube-vip" in i.ref)
    assert vip.ref == kube_vip_upstream(moved) and vip.path == f"k8s/kube-vip:{vip.ref.rsplit(':', 1)[1]}"
    assert registry_path("localhost/a/b:1") == "a/b:1" and registry_path("rancher/a:1") == "rancher/a:1"
    assert registry_path("busybox:1") == "library/busybox:1"  # the path containerd asks a docker.io mirror for


def test_the_driver_image_follows_the_nodes_os(tmp_path: Path) -> None:
    """The tag is the one the operator pulls on nodes of ``cluster.versions.os``; an OS NVIDIA publishes no
    driver image for (Debian 12) is refused on the operator path and has no driver image on the host path."""

    def on(os_name: str, host: bool = False) -> Any:
        def edit(doc: dict[str, Any]) -> None:
            doc["cluster"]["versions"] = {"os": os_name}
            if host:
                doc["nvidia"] = {"profiles": {m: {"driver": "host"} for m in ("R760xa", "XE9680")}}

        return edit

    tags = {os: driver_image(load_inventory(_edited_lab(tmp_path / os, on(os)))) for os in ("ubuntu-22.04", "rhel-9.4")}
    assert tags == {
        "ubuntu-22.04": "nvcr.io/nvidia/driver:580.95.05-ubuntu22.04",
        "rhel-9.4": "nvcr.io/nvidia/driver:580.95.05-rhel9.4",
    }
    with pytest.raises(InvalidInput) as refused:
        load_inventory(_edited_lab(tmp_path / "debian", on("debian-12")))
    (problem,) = [p for p in refused.value.problems if p.path == "cluster.versions.os"]
    assert "driver:<version>-debian12" in problem.message and "nvidia.profiles.XE9680.driver: host" in problem.fix
    host = load_inventory(_edited_lab(tmp_path / "debian-host", on("debian-12", host=True)))
    assert driver_image(host) is None
    assert not [i for i in upstream_images(host) if i.ref.startswith("nvcr.io/nvidia/driver")]


# -- the import, for real ----------------------------------------------------------------------------------
def _prerequisites() -> str:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "needs root and iproute2 (network namespaces)"
    missing = [t for t in ("nginx", "skopeo", "busybox") if shutil.which(t, path="/usr/sbin:/usr/bin:/bin") is None]
    if missing or not Path("/usr/bin/docker-registry").exists():
        return f"missing: {missing or ['docker-registry']} (scripts/apt-packages.txt)"
    return ""


@dataclass
class Site:
    """The head node's registry in a namespace of its own, on the lab inventory's head address."""

    inventory: Path
    state_dir: Path
    network: LabNetwork
    services: LabHeadServices

    def images(self, *args: str, as_json: bool = True) -> tuple[int, dict[str, Any], str]:
        """``rackctl --env host mirror images ARGS [--json]`` run on the head node (inside the namespace): its
        exit status, its JSON document (``{}`` without ``--json``) and its stderr (all its output without)."""
        argv = [sys.executable, "-m", "bootstrap", "--env", "host", "mirror", "images"]
        argv += ["-i", str(self.inventory), "--state-dir", str(self.state_dir), *args, *(["--json"] if as_json else [])]
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'lab'}", "COLUMNS": "400"}
        proc = subprocess.run(
            [*self.network.exec_prefix(), *argv], capture_output=True, text=True, check=False, env=env, cwd=REPO
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        if not as_json:
            return proc.returncode, {}, proc.stdout + proc.stderr
        return proc.returncode, json.loads(proc.stdout), proc.stderr


@contextmanager
def _site(tmp_path: Path, edit: Any = None) -> Iterator[Site]:
    reason = _prerequisites()
    if reason:
        pytest.skip(reason)
    inventory = _edited_lab(tmp_path / "site", edit or (lambda _doc: None))
    head_ip = "10.200.0.11"  # head-01's PXE address: where `--env host` finds the registry
    suffix = secrets.token_hex(3)
    network = LabNetwork(f"rku-{suffix}", f"rku{suffix}", f"{head_ip}/24")
    network.up()
    services = LabHeadServices(load_inventory(inventory), tmp_path / "state", tmp_path / ".lab", network)
    try:
        services.start()
        assert services.registry_address == f"{head_ip}:5000"
        yield Site(inventory, tmp_path / "state", network, services)
    finally:
        services.stop()
        network.down()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with _site(tmp_path) as served:
        yield served


def _save_standin(image: UpstreamImage, folder: Path, work: Path, transport: str = "oci-archive") -> str:
    """A STAND-IN for ``image`` saved as its archive: a one-file image from ``oci.py``, copied by skopeo into
    ``folder/<archive>``. Returns the layout's manifest digest."""
    content = work / f"{image.archive}.txt"
    content.write_text(f"stand-in for {image.ref}\n")
    layout = work / image.archive.removesuffix(".tar")
    digest = write_layout(layout, [Entry("etc/rackctl-standin", source=content, mode=0o644)], tag="v", cmd=["/x"])
    dest = f"{transport}:{folder / image.archive}" + (f":{image.ref}" if transport == "docker-archive" else "")
    subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}:v", dest], check=True, capture_output=True)
    return digest


def _by_ref(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {u["image"]: u for u in data["upstream"]}


@pytest.mark.lab
@pytest.mark.slow
def test_plan_import_present_and_a_missing_archive(site: Site, tmp_path: Path) -> None:
    images = upstream_images(load_inventory(site.inventory))
    saved, work = tmp_path / "saved", tmp_path / "work"
    saved.mkdir()
    work.mkdir()
    triton = next(i for i in images if i.ref == TRITON_IMAGE)
    digests = {
        i.ref: _save_standin(i, saved, work, "docker-archive" if i.ref == CUDA_IMAGE else "oci-archive")
        for i in images
        if i is not triton  # the operator has not saved Triton's image yet
    }

    # plan, nothing in the registry: every image absent; no --from: nothing wrong yet
    rc, plan, _ = site.images("--plan")
    assert rc == 0 and plan["applied"] is False
    assert [u["state"] for u in plan["upstream"]] == ["absent"] * len(images)
    assert all(u["target"] == f"10.200.0.11:5000/{i.path}" for u, i in zip(plan["upstream"], images, strict=True))

    # plan with --from: what would be imported; Triton's archive is missing, named with the command that makes it
    rc, plan, _ = site.images("--plan", "--from", str(saved))
    states = {ref: u["state"] for ref, u in _by_ref(plan).items()}
    assert rc == 1 and plan["ok"] is False
    assert states == {**dict.fromkeys(digests, "would import"), TRITON_IMAGE: "archive missing"}
    missing = _by_ref(plan)[TRITON_IMAGE]
    assert missing["fix"] == triton.save_command(saved) and triton.archive in missing["problem"]
    assert _by_ref(plan)[CUDA_IMAGE]["archive_format"] == "docker-archive"
    rc, _, shown = site.images("--plan", "--from", str(saved), as_json=False)
    assert rc == 1 and f"{saved / triton.archive} not found; fix: {triton.save_command(saved)}" in shown

    # import: the others go in (the built check image too), Triton's is reported, exit 1
    rc, done, _ = site.images("--from", str(saved))
    assert rc == 1 and done["ok"] is False and [r["ok"] for r in done["images"]] == [True]
    result = _by_ref(done)
    assert result[TRITON_IMAGE]["state"] == "archive missing" and result[TRITON_IMAGE]["fix"] == missing["fix"]
    for ref, digest in digests.items():
        assert result[ref]["state"] == "imported", result[ref]
        if ref != CUDA_IMAGE:  # an oci-archive goes in byte for byte (a docker-archive's manifest is rewritten)
            assert result[ref]["registry_digest"] == digest

    # the operator saves the last one; the next run imports it and leaves the others unchanged
    digests[TRITON_IMAGE] = _save_standin(triton, saved, work)
    rc, again, _ = site.images("--from", str(saved))
    assert rc == 0 and again["ok"] is True
    after = _by_ref(again)
    assert (
        after[TRITON_IMAGE]["state"] == "imported" and after[TRITON_IMAGE]["registry_digest"] == digests[TRITON_IMAGE]
    )
    for ref in digests.keys() - {TRITON_IMAGE}:
        assert after[ref]["state"] == "present" and after[ref]["registry_digest"] == result[ref]["registry_digest"]

    # a plan now: everything present, nothing to import
    rc, plan, _ = site.images("--plan", "--from", str(saved))
    assert rc == 0 and {u["state"] for u in plan["upstream"]} == {"present"}


@pytest.mark.lab
@pytest.mark.slow
def test_without_sxm_nodes_no_nccl_image_a_bad_archive_and_a_silent_registry(tmp_path: Path) -> None:
    with _site(tmp_path, _without_sxm) as site:
        saved = tmp_path / "saved"
        saved.mkdir()
        cuda = UpstreamImage(CUDA_IMAGE, registry_path(CUDA_IMAGE), ())
        (saved / cuda.archive).write_text("not a tar\n")
        rc, plan, _ = site.images("--plan", "--from", str(saved))
        refs = list(_by_ref(plan))
        assert NCCL_IMAGE not in refs and CUDA_IMAGE in refs
        assert rc == 1 and _by_ref(plan)[CUDA_IMAGE]["state"] == "bad archive"
        assert "not a readable tar archive" in _by_ref(plan)[CUDA_IMAGE]["problem"]

        # the registry stops answering: every image unknown, the registry asked once, its error given
        site.services.stop()
        rc, plan, _ = site.images("--plan")
        assert rc == 0 and {u["state"] for u in plan["upstream"]} == {"unknown"}
        errors = {u["registry_error"] for u in plan["upstream"]}
        assert len(errors) == 1 and "10.200.0.11:5000" in errors.pop()


@contextmanager
def _containerd(network: LabNetwork) -> Iterator[Path]:
    """A real containerd inside ``network`` with its own root, state and socket (no CRI); yields the socket."""
    base = Path(tempfile.mkdtemp(prefix="rkc-"))  # short: a unix socket path has 108 bytes at most
    sock = base / "c.sock"
    config = base / "config.toml"
    config.write_text(
        f'version = 2\nroot = "{base}/root"\nstate = "{base}/state"\n'
        f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{sock}"\n'
    )
    log = (base / "containerd.log").open("wb")
    proc = subprocess.Popen([*network.exec_prefix(), "containerd", "--config", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120  # generous: a loaded CI machine
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sock.exists(), (base / "containerd.log").read_text()
        yield sock
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def _node_hosts_dir(folder: Path, upstream: str, registry: str, ca_pem: str) -> Path:
    """``/etc/containerd/certs.d`` as role container_runtime writes it for ``upstream`` (its own template)."""
    template = (REPO / "roles/container_runtime/templates/mirror-hosts.toml.j2").read_text()
    (folder / registry).mkdir(parents=True)
    (folder / registry / "ca.crt").write_text(ca_pem)
    (folder / upstream).mkdir()
    (folder / upstream / "hosts.toml").write_text(
        jinja2.Environment(undefined=jinja2.StrictUndefined)
        .from_string(template)
        .render(
            item=upstream,
            ansible_managed="test",
            container_runtime_upstream_servers={},
            container_runtime_registry=registry,
            container_runtime_registry_ca_pem=ca_pem,
            container_runtime_certs_dir=str(folder),
        )
    )
    return folder


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd not installed (scripts/apt-packages.txt)")
def test_containerd_pulls_an_imported_image_by_its_upstream_name(site: Site, tmp_path: Path) -> None:
    """The node's side: containerd, configured as role container_runtime configures it, fetches
    ``nvcr.io/nvidia/cuda:TAG`` from the registry's ``nvidia/cuda:TAG`` (nvcr.io is unreachable in the namespace)."""
    saved, work = tmp_path / "saved", tmp_path / "work"
    saved.mkdir()
    work.mkdir()
    cuda = next(i for i in upstream_images(load_inventory(site.inventory)) if i.ref == CUDA_IMAGE)
    digest = _save_standin(cuda, saved, work)
    rc, done, _ = site.images("--from", str(saved))
    assert rc == 1 and _by_ref(done)[CUDA_IMAGE]["state"] == "imported"  # the other archives are not there
    ca_pem = site_vars(load_inventory(site.inventory), site.state_dir, None)["rackctl_registry"]["ca_pem"]
    hosts = _node_hosts_dir(tmp_path / "certs.d", "nvcr.io", "10.200.0.11:5000", ca_pem)
    with _containerd(site.network) as sock:
        ctr = [*site.network.exec_prefix(), "ctr", "--address", str(sock), "-n", "rackctl-test"]
        fetched = subprocess.run(
            [*ctr, "content", "fetch", "--hosts-dir", str(hosts), CUDA_IMAGE],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert fetched.returncode == 0, fetched.stderr
        listed = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True, check=True).stdout
    assert any(
        line.split()[:3] == [CUDA_IMAGE, "application/vnd.oci.image.manifest.v1+json", digest]
        for line in listed.splitlines()
    ), listed
