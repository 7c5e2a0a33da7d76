"""Benchmark: render + check 20 models (goal: under a second), and the real tritonserver load time.

Run: .venv/bin/python bench/bench_triton.py
Peer measured in the same run: a plain copy of the same rendered files (the file-system floor), as a ratio.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.check import check_model_dir
from bootstrap.triton.loadcheck import load_check
from bootstrap.triton.render import render_all, render_model

MODELS = 20


def specs() -> list[ModelSpec]:
    versions = ["0.8.0", "0.11.0", "0.14.0", "0.16.0"]
    return [
        ModelSpec(
            name=f"model-{i:02d}",
            trtllm_version=versions[i % len(versions)],
            hf_model_dir=f"/models/hf/m{i}",
            engine_dir=f"/models/engines/m{i}",
            tensor_parallelism=1 + i % 4,
            streaming=bool(i % 2),
        )
        for i in range(MODELS)
    ]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        mem_started = time.perf_counter()
        for spec in specs():
            render_model(spec)
        in_memory = time.perf_counter() - mem_started
        started = time.perf_counter()
        render_all(specs(), out)
        rendered = time.perf_counter() - started
        problems = [check_model_dir(out / s.name, skip_engine=True).problems for s in specs()]
        total = time.perf_counter() - started
        assert not any(problems), problems
        copy_started = time.perf_counter()
        shutil.copytree(out, Path(tmp) / "copy")
        copy = time.perf_counter() - copy_started
        print(f"render {MODELS} models in memory (templates only): {in_memory:.3f} s")
        print(f"render {MODELS} models to disk: {rendered:.3f} s; render + check: {total:.3f} s (goal < 1 s)")
        print(f"peer, plain copy of the same files: {copy:.3f} s; ratio render+check/copy: {total / copy:.1f}x")
        try:
            load = load_check(out / "model-01")
            seconds = load.get("load_seconds")
            print(f"tritonserver load (5 models, CPU, stand-in tensorrt_llm): {seconds} s, ok={load['ok']}")
        except Exception as exc:  # the wheel is a test extra
            print(f"tritonserver load: skipped ({exc})")


if __name__ == "__main__":
    main()
