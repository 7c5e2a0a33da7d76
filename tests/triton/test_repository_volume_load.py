"""The real tritonserver (nvidia-pytriton wheel, CPU) loads the repository as the initContainer left it.

The path: render -> ConfigMap ``<model>-repository`` -> projected as the kubelet lays out a ConfigMap volume
with ``items`` (:mod:`tests.triton.kubelet_projection` stands in for the kubelet: none runs here) -> the
copier script run with ``python3`` -> tritonserver started on the copied path (the symlink, the marker file
and the empty version directory as the copier made them). ``tensorrt_llm`` is the load check's Python
stand-in (the only GPU-only model), put into the repository before the ConfigMap is built, so what Triton
loads is exactly what the copier wrote.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstrap.triton import repository_volume as rv
from bootstrap.triton.loadcheck import build_test_tokenizer, model_states, standin_repository
from bootstrap.triton.render import RenderedModel, render_all
from bootstrap.triton.server import TritonServer
from bootstrap.triton.smoke import DEFAULT_PROMPT, run_smoke
from tests.triton.conftest import make_spec
from tests.triton.kubelet_projection import project_config_map

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("pytriton") is None, reason="nvidia-pytriton wheel (tritonserver) not installed"
    ),
]
MODELS = ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls"]


def _as_rendered(name: str, repo: Path) -> RenderedModel:
    """A repository directory as render's in-memory form: its files and its empty directories."""
    files = {p.relative_to(repo).as_posix(): p.read_text() for p in repo.rglob("*") if p.is_file()}
    dirs = tuple(sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_dir() and not any(p.iterdir())))
    return RenderedModel(name, files, dirs)


@pytest.fixture(scope="module")
def copied() -> Iterator[tuple[Path, RenderedModel, dict[str, object]]]:
    """The stand-in repository delivered through ConfigMap + copier; (copied path, what was shipped, copier)."""
    with tempfile.TemporaryDirectory(prefix="rackctl-repo-load-") as tmp:
        work = Path(tmp)
        spec = make_spec(name="copied", streaming=True)
        render_all([spec], work / "out")
        tokenizer = build_test_tokenizer(work / "tokenizer")
        standin = standin_repository(work / "out" / spec.name, work / "standin", tokenizer)
        shipped = _as_rendered(spec.name, standin)
        assert "ensemble/1" in shipped.dirs  # an empty version directory the ConfigMap cannot carry
        config_map = rv.repository_config_map(spec, shipped, {"name": "copied-repository", "namespace": "triton"})
        source = project_config_map(config_map, rv.source_volume(config_map), work / "source")
        dest = work / "volume" / spec.name / "model_repository"
        args = [shutil.which("python3") or "python3", str(rv.COPIER_SCRIPT), f"--source={source}", f"--dest={dest}"]
        proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)
        assert proc.returncode == 0, proc.stderr
        yield dest, shipped, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def server(copied: tuple[Path, RenderedModel, dict[str, object]]) -> Iterator[TritonServer]:
    with TritonServer(copied[0]) as running:
        yield running


def test_the_copied_tree_is_what_was_shipped(copied: tuple[Path, RenderedModel, dict[str, object]]) -> None:
    dest, shipped, out = copied
    assert dest.is_symlink() and out["changed"] is True
    assert _as_rendered("copied", dest.resolve()).files == {**shipped.files, rv.MARKER: f"{out['digest']}\n"}
    assert (dest / "ensemble" / "1").is_dir() and not any((dest / "ensemble" / "1").iterdir())


def test_tritonserver_loads_every_model_of_the_copied_repository(server: TritonServer) -> None:
    assert model_states(server.url) == dict.fromkeys(MODELS, "READY")  # the marker file is no model


@pytest.mark.parametrize("entry", ["ensemble", "tensorrt_llm_bls"])
def test_the_copied_repository_generates(server: TritonServer, entry: str) -> None:
    result = run_smoke(server.url, model=entry, max_tokens=32)
    assert result.ok, result.errors
    assert result.text.startswith(DEFAULT_PROMPT)  # the stand-in echoes the prompt through the real tokenizer
