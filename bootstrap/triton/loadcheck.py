"""Real load check: the rendered repository in the real tritonserver on CPU, the GPU-only model replaced.

``tensorrt_llm`` (the only part that needs a GPU) becomes a Python stand-in with the same inputs and outputs;
the tokenizer directory becomes a local one (a tiny byte-level BPE tokenizer built offline if none is given).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bootstrap.errors import EnvironmentMissing, Problem
from bootstrap.triton.render import REPOSITORY_DIR, TEMPLATES, load_written_spec
from bootstrap.triton.server import TritonFailed, TritonServer
from bootstrap.triton.smoke import run_smoke

TOKENIZER_CORPUS = (
    "What is the capital of Texas? The capital of Texas is Austin. "
    "Dell PowerEdge servers serve large language models with Triton and TensorRT-LLM."
)


def build_test_tokenizer(dest: Path) -> Path:
    """Train a tiny byte-level BPE tokenizer offline (no model hub) and save ``dest/tokenizer.json``."""
    try:
        from tokenizers import (  # noqa: PLC0415 - the `load-check` extra
            Tokenizer,
            decoders,
            models,
            pre_tokenizers,
            trainers,
        )
    except ImportError as exc:
        raise EnvironmentMissing(
            "the load check needs the `tokenizers` package for its offline tokenizer",
            problems=[Problem("tokenizers", "not installed", "pip install 'rackctl[load-check]'")],
        ) from exc
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([TOKENIZER_CORPUS], trainer=trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(dest / "tokenizer.json"))
    return dest


def _edit_config(path: Path, *, backend: str | None = None, tokenizer_dir: Path | None = None) -> None:
    config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    if backend is not None:
        config.backend = backend
    if tokenizer_dir is not None and "tokenizer_dir" in config.parameters:
        config.parameters["tokenizer_dir"].string_value = str(tokenizer_dir)
    path.write_text(text_format.MessageToString(config))


def standin_repository(model_dir: Path, dest: Path, tokenizer_dir: Path) -> Path:
    """Copy ``model_dir``'s repository to ``dest`` with the GPU-only model replaced by its stand-in."""
    spec = load_written_spec(model_dir)
    repo = dest / REPOSITORY_DIR
    shutil.copytree(model_dir / REPOSITORY_DIR, repo)
    llm = repo / "tensorrt_llm"
    (llm / "1").mkdir(exist_ok=True)
    if spec.layout == "inflight_batcher_llm":
        _edit_config(llm / "config.pbtxt", backend="python")
        shutil.copyfile(TEMPLATES / "standin" / "model.py", llm / "1" / "model.py")
        for model in ("preprocessing", "postprocessing"):
            _edit_config(repo / model / "config.pbtxt", tokenizer_dir=tokenizer_dir)
    else:
        shutil.copyfile(TEMPLATES / "standin" / "llmapi_model.py", llm / "1" / "model.py")
    return repo


#: Error lines tritonserver prints on every machine without a GPU; not about the repository.
CPU_ONLY_NOISE = ("CudaDriverHelper has not been initialized",)


def triton_errors(log: str) -> list[str]:
    """Triton's own error lines (``E...`` and ``error: ...``), verbatim, without the CPU-only noise."""
    lines = [ln for ln in log.splitlines() if ln.startswith(("E", "error:"))]
    return [ln for ln in lines if not any(noise in ln for noise in CPU_ONLY_NOISE)]


def model_states(url: str) -> dict[str, str]:
    """Name -> state of every model in the server's repository index."""
    client = httpclient.InferenceServerClient(url)
    try:
        return {m["name"]: m.get("state", "UNKNOWN") for m in client.get_model_repository_index()}
    finally:
        client.close()


def load_check(model_dir: Path, *, tokenizer_dir: Path | None = None) -> dict[str, Any]:
    """Load one rendered model in tritonserver, assert every model READY and generation answers."""
    spec = load_written_spec(model_dir)
    entries = ["ensemble", "tensorrt_llm_bls"] if spec.layout == "inflight_batcher_llm" else ["tensorrt_llm"]
    result: dict[str, Any] = {"model": spec.name, "ok": False, "streaming": spec.streaming, "errors": []}
    with tempfile.TemporaryDirectory(prefix="rackctl-loadcheck-") as tmp:
        work = Path(tmp)
        tok = tokenizer_dir or build_test_tokenizer(work / "tokenizer")
        repo = standin_repository(model_dir, work, tok)
        server = TritonServer(repo)
        try:
            with server:
                result["load_seconds"] = round(server.load_seconds, 2)
                states = model_states(server.url)
                result["models"] = states
                result["errors"] += [f"model {n} is {s}, not READY" for n, s in states.items() if s != "READY"]
                result["smoke"] = {}
                for entry in entries:
                    smoke = run_smoke(server.url, model=entry, stream=spec.streaming)
                    result["smoke"][entry] = smoke.as_dict()
                    result["errors"] += [f"{entry}: {e}" for e in smoke.errors]
                    if not smoke.text:
                        result["errors"].append(f"{entry}: generate answered an empty text_output")
                    if not spec.streaming:
                        streamed = run_smoke(server.url, model=entry, stream=True)
                        if not any("generate_stream" in e for e in streamed.errors):
                            result["errors"].append(f"{entry}: generate_stream answered, model not decoupled")
                if result["errors"]:
                    result["triton_log"] = server.log()
        except TritonFailed as exc:
            result["errors"] += [str(exc), *triton_errors(exc.log)]
            result["triton_log"] = exc.log
    result["ok"] = not result["errors"]
    return result
