"""The rendered repository delivered to the pod: ConfigMap ``<model>-repository`` and the copier initContainer.

The copier script (``rackctl_copy_repository.py``, what the initContainer runs) is RUN with a real ``python3``
on a directory laid out as the kubelet projects the ConfigMap volume with ``items``
(:mod:`tests.triton.kubelet_projection` stands in for the kubelet: none runs here).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton import repository_volume as rv
from bootstrap.triton.manifests import build_manifests, validate_objects
from bootstrap.triton.render import RenderedModel, render_model
from tests.triton.conftest import make_spec
from tests.triton.kubelet_projection import project_config_map

PYTHON3 = shutil.which("python3") or "python3"
NFS = {"storage": {"kind": "nfs", "nfs_server": "powerscale.lab", "nfs_path": "/ifs/ai"}}


def _objects(spec: ModelSpec) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in build_manifests(spec)["deployment.yaml"]}


def _pod(spec: ModelSpec) -> dict[str, Any]:
    return dict(_objects(spec)[("Deployment", f"triton-{spec.name}")]["spec"]["template"])


def _config_map(spec: ModelSpec) -> dict[str, Any]:
    return _objects(spec)[("ConfigMap", f"{spec.name}-repository")]


def _project(spec: ModelSpec, where: Path) -> Path:
    """The pod's ``repository-source`` volume as the kubelet would lay it out."""
    config_map = _config_map(spec)
    volume = next(v for v in _pod(spec)["spec"]["volumes"] if v["name"] == "repository-source")
    return project_config_map(config_map, volume, where)


def _copy(source: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    """Run the copier as the initContainer does: ``python3 rackctl_copy_repository.py --source --dest``."""
    args = [PYTHON3, str(rv.COPIER_SCRIPT), f"--source={source}", f"--dest={dest}"]
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)


def _copied(source: Path, dest: Path) -> dict[str, Any]:
    proc = _copy(source, dest)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _tree(root: Path) -> tuple[dict[str, str], set[str]]:
    """Files (text) and directories under ``root``, the copier's marker left out."""
    files, dirs = {}, set()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            dirs.add(rel)
        elif rel != rv.MARKER:
            files[rel] = path.read_text()
    return files, dirs


def _expected_dirs(rendered: RenderedModel) -> set[str]:
    dirs = set(rendered.dirs)
    for rel in [*rendered.files, *rendered.dirs]:
        parts = rel.split("/")
        dirs |= {"/".join(parts[:i]) for i in range(1, len(parts))}
    return dirs


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


@pytest.mark.parametrize(
    "overrides",
    [{}, {"layout": "llmapi", "trtllm_version": "1.1.0", "engine_dir": None}, {"deployment": NFS}],
    ids=["inflight_batcher_llm", "llmapi", "nfs"],
)
def test_manifests_carry_the_repository_config_map_and_the_copier(overrides: dict[str, Any]) -> None:
    spec = make_spec(**overrides)
    objects = build_manifests(spec)["deployment.yaml"]
    assert validate_objects(objects) == []
    config_map = _config_map(spec)
    rendered = render_model(spec)
    keys = [k for k in config_map["data"] if k != rv.MANIFEST_KEY]
    assert all(rv.KEY_PATTERN.fullmatch(k) and "/" not in k for k in keys)
    manifest = json.loads(config_map["data"][rv.MANIFEST_KEY])
    assert manifest["files"] == sorted(rendered.files) and manifest["dirs"] == sorted(rendered.dirs)
    pod = _pod(spec)
    assert pod["metadata"]["annotations"][rv.DIGEST_ANNOTATION] == manifest["digest"]
    (init,) = pod["spec"]["initContainers"]
    (triton,) = pod["spec"]["containers"]
    assert init["image"] == triton["image"] and init["command"][0] == "python3"
    dest = next(a for a in init["command"] if a.startswith("--dest=")).removeprefix("--dest=")
    assert f"--model_repo={dest}" in triton["command"]
    launcher = _objects(spec)[("ConfigMap", f"{spec.name}-launcher")]["data"]
    assert launcher[rv.COPIER_SCRIPT.name] == rv.COPIER_SCRIPT.read_text()
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    items = volumes["repository-source"]["configMap"]["items"]
    assert {i["path"] for i in items} == {rv.MANIFEST_KEY} | {f"repository/{rel}" for rel in rendered.files}
    init_mounts = {m["name"]: m for m in init["volumeMounts"]}
    triton_mounts = {m["name"]: m for m in triton["volumeMounts"]}
    # The model's files are mounted read-only: the copy lives in a pod-local emptyDir, read-only for Triton.
    assert dest == f"/opt/rackctl-models/{spec.name}/model_repository"
    assert volumes["model-repository"] == {"name": "model-repository", "emptyDir": {}}
    assert init_mounts["model-repository"]["mountPath"] == "/opt/rackctl-models"
    assert triton_mounts["model-repository"]["readOnly"] is True
    assert "weights" not in init_mounts
    assert triton_mounts["weights"] == {
        "name": "weights",
        "mountPath": spec.deployment.storage.mount_path,
        "readOnly": True,
    }


def test_a_changed_repository_changes_the_pod_template_and_only_then() -> None:
    before = _pod(make_spec())["metadata"]["annotations"][rv.DIGEST_ANNOTATION]
    assert _pod(make_spec())["metadata"]["annotations"][rv.DIGEST_ANNOTATION] == before
    after = _pod(make_spec(max_batch_size=16))["metadata"]["annotations"][rv.DIGEST_ANNOTATION]
    assert after != before


def test_copy_equals_the_rendered_tree_with_its_empty_version_dirs(tmp_path: Path) -> None:
    spec = make_spec()
    source = _project(spec, tmp_path / "source")
    dest = tmp_path / "volume" / spec.name / "model_repository"
    out = _copied(source, dest)
    rendered = render_model(spec)
    files, dirs = _tree(dest)
    assert files == rendered.files
    assert dirs == _expected_dirs(rendered)
    assert {"tensorrt_llm/1", "ensemble/1"} <= dirs
    assert [list((dest / d).iterdir()) for d in ("tensorrt_llm/1", "ensemble/1")] == [[], []]
    digest = _pod(spec)["metadata"]["annotations"][rv.DIGEST_ANNOTATION]
    assert (dest / rv.MARKER).read_text().strip() == digest == out["digest"]
    assert out["changed"] is True and out["files"] == len(rendered.files)
    # A relative symlink: the node mounts the volume elsewhere than the pod does.
    assert dest.is_symlink() and os.readlink(dest) == f".model_repository-{digest}"
    assert _leftovers(dest.parent) == [f".model_repository-{digest}", "model_repository"]


def test_second_copy_writes_nothing(tmp_path: Path) -> None:
    spec = make_spec(layout="llmapi", trtllm_version="1.1.0", engine_dir=None)
    source = _project(spec, tmp_path / "source")
    dest = tmp_path / "volume" / spec.name / "model_repository"
    _copied(source, dest)
    stamps = {p: p.lstat().st_mtime_ns for p in [dest, *dest.rglob("*")]}
    again = _copied(source, dest)
    assert again["changed"] is False
    assert {p: p.lstat().st_mtime_ns for p in [dest, *dest.rglob("*")]} == stamps


def test_a_changed_repository_replaces_the_old_one(tmp_path: Path) -> None:
    old, new = make_spec(), make_spec(max_batch_size=16)
    dest = tmp_path / "volume" / old.name / "model_repository"
    first = _copied(_project(old, tmp_path / "old"), dest)
    second = _copied(_project(new, tmp_path / "new"), dest)
    assert second["changed"] is True and second["digest"] != first["digest"]
    assert _tree(dest)[0] == render_model(new).files != render_model(old).files
    assert second["removed"] == str(dest.parent / f".model_repository-{first['digest']}")
    assert _leftovers(dest.parent) == [f".model_repository-{second['digest']}", "model_repository"]


def test_a_directory_placed_by_hand_is_replaced(tmp_path: Path) -> None:
    spec = make_spec()
    dest = tmp_path / "volume" / spec.name / "model_repository"
    (dest / "stale" / "1").mkdir(parents=True)
    (dest / "stale" / "config.pbtxt").write_text('name: "stale"\n')
    out = _copied(_project(spec, tmp_path / "source"), dest)
    assert _tree(dest)[0] == render_model(spec).files
    assert _leftovers(dest.parent) == [f".model_repository-{out['digest']}", "model_repository"]


def test_a_projection_not_matching_its_manifest_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    old, new = make_spec(), make_spec(max_batch_size=16)
    dest = tmp_path / "volume" / old.name / "model_repository"
    first = _copied(_project(old, tmp_path / "old"), dest)
    source = _project(new, tmp_path / "new")
    (source / "repository" / "ensemble" / "config.pbtxt").write_text("changed under the pod\n")
    proc = _copy(source, dest)
    assert proc.returncode == 1
    assert "do not match rackctl-repository.json" in proc.stderr
    assert _tree(dest)[0] == render_model(old).files
    assert _leftovers(dest.parent) == [f".model_repository-{first['digest']}", "model_repository"]


def _copier_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rackctl_copy_repository", rv.COPIER_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_copier_and_rackctl_compute_the_same_digest() -> None:
    rendered = render_model(make_spec())
    contents = {rel: text.encode() for rel, text in rendered.files.items()}
    copier = _copier_module()
    assert copier.repository_digest(contents, list(rendered.dirs)) == rv.repository_digest(contents, rendered.dirs)
    assert (copier.MANIFEST, copier.TREE, copier.MARKER) == (rv.MANIFEST_KEY, rv.TREE_DIR, rv.MARKER)


def test_a_copy_failing_half_way_leaves_the_previous_repository_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the new tree is written (in-process, the write made to fail half way)."""
    old, new = make_spec(), make_spec(max_batch_size=16)
    dest = tmp_path / "volume" / old.name / "model_repository"
    first = _copied(_project(old, tmp_path / "old"), dest)
    copier = _copier_module()
    real_write = copier._write_tree

    def write_half(root: str, digest: str, files: dict[str, bytes], dirs: list[str]) -> None:
        half = dict(list(files.items())[: len(files) // 2])
        real_write(root, digest, half, dirs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(copier, "_write_tree", write_half)
    with pytest.raises(OSError, match="No space left"):
        copier.install(str(_project(new, tmp_path / "new")), str(dest))
    assert _tree(dest)[0] == render_model(old).files
    assert (dest / rv.MARKER).read_text().strip() == first["digest"]
    assert _leftovers(dest.parent) == [f".model_repository-{first['digest']}", "model_repository"]


def test_readers_see_one_whole_repository_while_it_is_switched(tmp_path: Path) -> None:
    """A reader opening files through the repository path while copies switch it back and forth."""
    specs = [make_spec(), make_spec(max_batch_size=16)]
    sources = [_project(s, tmp_path / f"source-{i}") for i, s in enumerate(specs)]
    expected = {rv.repository_digest({k: v.encode() for k, v in r.files.items()}, r.dirs): r.files
                for r in map(render_model, specs)}  # fmt: skip
    dest = tmp_path / "volume" / "llama3-8b" / "model_repository"
    _copied(sources[0], dest)
    errors: list[str] = []
    reads = 0
    stop = threading.Event()

    def read() -> None:
        nonlocal reads
        while not stop.is_set():
            try:  # through the repository path, as Triton opens it: always there
                with (dest / "ensemble" / "config.pbtxt").open():
                    pass
            except OSError as exc:
                errors.append(f"repository path missing: {exc}")
            tree = dest.resolve()
            try:
                digest = (tree / rv.MARKER).read_text().strip()
                files = {rel: (tree / rel).read_text() for rel in expected.get(digest, {})}
            except FileNotFoundError:
                continue  # an old tree removed after the switch while this reader still walked it
            if digest not in expected or files != expected[digest]:
                errors.append(f"tree {tree.name} is not whole")
            reads += 1

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 9):
            _copied(sources[i % 2], dest)
    finally:
        stop.set()
        reader.join()
    assert errors == []
    assert reads > 0


def test_a_repository_over_one_mib_is_refused_naming_the_model_and_the_fix() -> None:
    spec = make_spec(name="huge")
    meta = {"name": "huge-repository", "namespace": "triton"}
    size_of = lambda n: sum(len(v) for v in rv.repository_config_map(spec, _big(n), meta)["data"].values())  # noqa: E731
    overhead = size_of(0)
    fits = rv.repository_config_map(spec, _big(rv.CONFIG_MAP_LIMIT - overhead), meta)
    assert sum(len(v.encode()) for v in fits["data"].values()) == rv.CONFIG_MAP_LIMIT
    with pytest.raises(InvalidInput) as caught:
        rv.repository_config_map(spec, _big(rv.CONFIG_MAP_LIMIT - overhead + 1), meta)
    (problem,) = caught.value.problems
    assert problem.path == "models[huge]"
    assert f"{rv.CONFIG_MAP_LIMIT + 1} bytes" in problem.message and "1 MiB" in problem.message
    assert "ConfigMap huge-repository" in problem.message and "tokenizer/vocab.txt" in problem.message
    assert "engine_dir" in problem.fix


def _big(n: int) -> RenderedModel:
    return RenderedModel("huge", {"ensemble/config.pbtxt": 'name: "ensemble"\n', "tokenizer/vocab.txt": "x" * n}, ())


def test_carries_repository_tells_a_deployment_that_brings_its_repository_from_one_that_does_not() -> None:
    pod_spec = make_spec()
    dep = _objects(pod_spec)[("Deployment", f"triton-{pod_spec.name}")]
    assert rv.carries_repository(dep)
    bare = json.loads(json.dumps(dep))
    del bare["spec"]["template"]["spec"]["initContainers"]
    assert not rv.carries_repository(bare)


def test_a_mount_path_on_rackctls_own_mounts_is_refused_naming_the_field() -> None:
    spec = make_spec(
        hf_model_dir="/opt/rackctl-models/shared/hf",
        engine_dir="/opt/rackctl-models/shared/e",
        deployment={"storage": {"mount_path": "/opt/rackctl-models/shared"}},
    )
    with pytest.raises(InvalidInput) as caught:
        build_manifests(spec)
    (problem,) = caught.value.problems
    assert problem.path == "models[llama3-8b].deployment.storage.mount_path"
    assert "/opt/rackctl-models/shared overlaps /opt/rackctl-models" in problem.message
    assert "/models" in problem.fix


def test_cli_manifests_write_the_repository_config_map(tmp_path: Path) -> None:
    models = tmp_path / "models.yml"
    models.write_text(
        "models:\n  - {name: a, trtllm_version: '0.14.0', hf_model_dir: /models/m, engine_dir: /models/e}\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["triton", "manifests", "--models", str(models), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    docs = {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all((out / "a" / "k8s" / "deployment.yaml").read_text())
    }
    assert (
        docs[("ConfigMap", "a-repository")]["data"]
        == _config_map(make_spec(name="a", hf_model_dir="/models/m", engine_dir="/models/e"))["data"]
    )


def test_two_pods_copying_the_same_repository_at_once_share_the_finished_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A surge pod on the same node finishes the same tree first, while this copy is still writing
    (in-process: the other pod's copy runs inside this one's write)."""
    spec = make_spec()
    source = str(_project(spec, tmp_path / "source"))
    dest = tmp_path / "volume" / spec.name / "model_repository"
    copier = _copier_module()
    real_write = copier._write_tree
    other: dict[str, Any] = {}

    def write_while_another_pod_finishes(root: str, digest: str, files: dict[str, bytes], dirs: list[str]) -> None:
        real_write(root, digest, files, dirs)
        if "started" not in other:
            other["started"] = True
            other.update(copier.install(source, str(dest)))  # the other pod: same digest, done first

    monkeypatch.setattr(copier, "_write_tree", write_while_another_pod_finishes)
    mine = copier.install(source, str(dest))
    assert other["changed"] is True and mine["changed"] is True
    assert mine["target"] == other["target"] and mine["removed"] is None
    assert _tree(dest)[0] == render_model(spec).files
    assert _leftovers(dest.parent) == [f".model_repository-{mine['digest']}", "model_repository"]
