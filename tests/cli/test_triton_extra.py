"""Triton's client is the ``triton`` extra: the base commands never import it (nor numpy, nor grpc), and the
commands that need it say which extra to install (exit 3, no traceback) where it is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import ROOT, rackctl_env

SAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"
HEAVY = ("tritonclient", "numpy", "grpc")


def run(
    argv: list[str], *, block: bool | tuple[str, ...], tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``rackctl ARGV`` in a fresh interpreter (the extra made absent when ``block``, or the modules it names);
    the heavy modules it loaded."""
    blocked = HEAVY if block is True else (block or ())
    script = f"""
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # import fails as if not installed
from bootstrap.cli import cli
sys.argv = ["rackctl", *{argv!r}]
try:
    cli()
finally:
    print("LOADED=" + ",".join(m for m in {HEAVY!r} if sys.modules.get(m) is not None), file=sys.stderr)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=rackctl_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    loaded = next(line for line in proc.stderr.splitlines() if line.startswith("LOADED="))
    return proc, [m for m in loaded.removeprefix("LOADED=").split(",") if m]


def test_base_commands_never_import_the_triton_client(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    for argv in (
        ["validate", "-i", str(SAMPLE), "--json"],
        ["plan", "-i", str(SAMPLE), "--state-dir", state, "--json"],
        ["triton", "render", "-i", str(SAMPLE), "--state-dir", state, "--json"],
    ):
        proc, loaded = run(argv, block=False, tmp_path=tmp_path)
        assert proc.returncode in (0, 5), (argv, proc.stdout[-2000:], proc.stderr[-2000:])
        assert loaded == [], (argv, loaded)


def test_triton_check_names_the_extra_when_it_is_missing(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    rendered, _ = run(
        ["triton", "render", "-i", str(SAMPLE), "--state-dir", state, "--json"], block=True, tmp_path=tmp_path
    )
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr  # rendering needs no extra
    proc, _ = run(["triton", "check", str(Path(state) / "triton"), "--json"], block=True, tmp_path=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and "pip install 'rackctl[triton]'" in json.dumps(doc)
    assert "Traceback" not in proc.stderr
    check = ["triton", "check", str(Path(state) / "triton"), "--skip-engine", "--json"]
    with_extra, _ = run(check, block=False, tmp_path=tmp_path)
    assert with_extra.returncode == 0, with_extra.stdout[-2000:]


def test_load_check_names_its_extra_when_a_piece_is_missing(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    rendered, _ = run(["triton", "render", "-i", str(SAMPLE), "--state-dir", state], block=True, tmp_path=tmp_path)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    for missing in (HEAVY, ("tokenizers",), ("pytriton",)):  # the client, the tokenizer, the tritonserver wheel
        proc, _ = run(["triton", "load-check", "--state-dir", state, "--json"], block=missing, tmp_path=tmp_path)
        assert proc.returncode == 3, (missing, proc.stdout + proc.stderr)
        assert "pip install 'rackctl[load-check]'" in proc.stdout, (missing, proc.stdout)
        assert "Traceback" not in proc.stderr, proc.stderr


def test_triton_manifests_name_the_cluster_extra_when_the_schemas_are_missing(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    argv = ["triton", "manifests", "-i", str(SAMPLE), "--state-dir", state, "--json"]
    proc, _ = run(argv, block=("kubernetes_validate",), tmp_path=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "pip install 'rackctl[cluster]'" in proc.stdout and "Traceback" not in proc.stderr
    with_extra, loaded = run(argv, block=False, tmp_path=tmp_path)
    assert with_extra.returncode == 0, with_extra.stdout[-2000:] + with_extra.stderr[-2000:]
    assert loaded == []  # validating manifests needs the cluster extra, never Triton's client


def test_only_the_load_checks_own_modules_need_the_client_to_import(tmp_path: Path) -> None:
    """Every other module of the product imports without the extra: the imports are where they are used."""
    script = f"""
import importlib, json, pkgutil, sys
for name in {(*HEAVY, "gevent", "google.protobuf")!r}:
    sys.modules[name] = None
import bootstrap
failed = {{}}
for found in pkgutil.walk_packages(bootstrap.__path__, "bootstrap."):
    if not found.name.endswith("__main__"):  # runs the CLI
        try:
            importlib.import_module(found.name)
        except ImportError as exc:
            failed[found.name] = str(exc)
print(json.dumps(failed))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=rackctl_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(json.loads(proc.stdout)) == ["bootstrap.triton.loadcheck", "bootstrap.triton.server"]
