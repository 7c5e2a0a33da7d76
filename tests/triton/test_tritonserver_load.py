"""The real tritonserver (from the nvidia-pytriton wheel) loads rendered repositories on CPU.

``tensorrt_llm`` is replaced by a Python stand-in (the only part that needs a GPU); the tokenizer is a tiny
byte-level BPE tokenizer trained offline with the ``tokenizers`` library (no model hub is reachable).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.triton.loadcheck import build_test_tokenizer, load_check, model_states, standin_repository
from bootstrap.triton.render import render_all
from bootstrap.triton.server import TritonServer
from bootstrap.triton.smoke import DEFAULT_PROMPT, run_load, run_smoke
from tests import timing
from tests.triton.conftest import make_spec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("pytriton") is None,
        reason="nvidia-pytriton wheel (tritonserver) not installed",
    ),
]


@pytest.fixture(scope="module")
def streaming_server():
    """One tritonserver for the module: a streaming (decoupled) in-flight-batcher repository."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        spec = make_spec(name="streamer", streaming=True, max_batch_size=16)
        render_all([spec], out / "out")
        tokenizer = build_test_tokenizer(out / "tokenizer")
        repo = standin_repository(out / "out" / spec.name, out / "work", tokenizer)
        with TritonServer(repo) as server:
            yield server


def test_every_model_is_ready(streaming_server):
    states = model_states(streaming_server.url)
    assert states == dict.fromkeys(
        ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls"], "READY"
    )


@pytest.mark.parametrize("entry", ["ensemble", "tensorrt_llm_bls"])
def test_generate_and_generate_stream_answer(streaming_server, entry):
    result = run_smoke(streaming_server.url, model=entry, max_tokens=64)
    assert result.ok, result.errors
    assert result.ready  # Triton answered 200 to /v2/models/<entry>/ready first
    # The stand-in echoes the prompt's token ids: the real tokenizer round trip must give the prompt back.
    assert result.text.startswith(DEFAULT_PROMPT)
    assert result.stream_chunks > 1  # one event per token when decoupled
    assert result.stream_text.startswith(DEFAULT_PROMPT)
    assert result.ttft_s is not None and result.ttft_s <= result.stream_latency_s


def test_a_model_triton_has_not_loaded_gets_no_request_and_says_so(streaming_server):
    result = run_smoke(streaming_server.url, model="llama-not-loaded", max_tokens=8)
    assert not result.ok and not result.ready
    (error,) = result.errors  # no generate or generate_stream was sent
    assert error.startswith("ready: HTTP 400") and "; Triton's repository: no model llama-not-loaded" in error
    assert "(it has ensemble, postprocessing, preprocessing, tensorrt_llm, tensorrt_llm_bls)" in error
    assert result.latency_s is None and result.stream_chunks == 0


def test_smoke_cli_reports_latencies(streaming_server):
    result = CliRunner().invoke(cli, ["triton", "smoke", "--url", streaming_server.url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] and data["latency_s"] > 0 and data["ttft_s"] > 0


def _generated(server: TritonServer, model: str) -> int:
    """Requests ``model`` of ``server`` has answered (Triton's statistics extension)."""
    with urllib.request.urlopen(f"http://{server.url}/v2/models/{model}/stats", timeout=10) as response:
        stats = json.loads(response.read())["model_stats"][0]["inference_stats"]["success"]
    return int(stats["count"])


def test_smoke_load_keeps_its_clients_sending_until_the_operator_stops_it(streaming_server):
    """``--load`` sends generate requests from every client until Ctrl-C (SIGINT) ends it: the command then
    exits 0 with the counts of what it sent, said to be stopped early, no request failed."""
    before = _generated(streaming_server, "ensemble")
    args = ["triton", "smoke", "--url", streaming_server.url, "--model", "ensemble", "--no-stream"]
    args += ["--max-tokens", "4", "--load", "600", "--concurrency", "3", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bootstrap", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # the load is under way once Triton has answered more than the smoke's own request
        timing.wait_for(lambda: _generated(streaming_server, "ensemble") >= before + 10, timeout=120, what="load")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    data = json.loads(out)
    load = data["load"]
    assert data["ok"] and load["interrupted"] and load["concurrency"] == 3, load
    assert load["failed"] == 0 and load["errors"] == [], load
    # every request the load counted was answered by Triton (the smoke's own one besides)
    assert 10 <= load["requests"] <= _generated(streaming_server, "ensemble") - before - 1, load
    assert 0 < load["p50_s"] <= load["p95_s"], load


def test_smoke_load_says_its_counts_within_80_columns(streaming_server):
    args = ["triton", "smoke", "--url", streaming_server.url, "--model", "ensemble", "--no-stream"]
    result = CliRunner().invoke(cli, [*args, "--load", "1", "--concurrency", "2"], terminal_width=80)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (counts,) = [line for line in lines if line.startswith("  load (1 s): ")]
    assert counts.endswith(", 2 clients, 0 failed") and "stopped early" not in counts, counts
    assert any(line.startswith("    latency p50 ") for line in lines), result.output
    assert all(len(line) <= 80 for line in lines), result.output


def test_a_load_on_an_endpoint_that_does_not_answer_counts_each_failure_by_its_reason():
    from bootstrap.triton.server import free_port

    url = f"127.0.0.1:{free_port()}"
    load = run_load(url, "ensemble", {"text_input": "hi", "max_tokens": 1}, seconds=1, concurrency=2, timeout=5)
    assert not load.interrupted and load.ran_s >= 1 and load.concurrency == 2
    assert load.requests == load.failed > 0 and load.p50_s is None
    (reason,) = load.errors  # one reason, counted
    assert f"(x{load.failed})" in reason and "refused" in reason.lower(), reason


def test_smoke_cli_fails_on_a_dead_endpoint():
    from bootstrap.triton.server import free_port

    result = CliRunner().invoke(cli, ["triton", "smoke", "--url", f"127.0.0.1:{free_port()}", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["ok"] is False


def test_load_check_non_streaming_refuses_generate_stream(tmp_path):
    spec = make_spec(name="plain", streaming=False)
    render_all([spec], tmp_path)
    result = load_check(tmp_path / spec.name)
    assert result["ok"], result
    assert result["smoke"]["ensemble"]["stream_chunks"] == 0


def test_load_check_surfaces_tritons_own_load_error(tmp_path):
    spec = make_spec(name="broken")
    render_all([spec], tmp_path)
    config = tmp_path / spec.name / "model_repository" / "ensemble" / "config.pbtxt"
    config.write_text(config.read_text().replace('value: "_output_ids"', 'value: "_missing_ids"', 1))
    result = CliRunner().invoke(cli, ["triton", "load-check", str(tmp_path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)["models"][0]
    assert not data["ok"]
    # Triton's own words, verbatim: the ensemble output is no longer connected.
    assert any("'_output_ids', is not connected" in e for e in data["errors"]), data["errors"]
    # ... and its log is surfaced (Triton prints its final "failed to load all models" only after a graceful
    # unload of up to 30 s, which a loaded machine may cut short: the load error line itself is always there)
    assert "is not connected" in data["triton_log"]


def test_load_check_llmapi_layout(tmp_path):
    spec = make_spec(name="api", layout="llmapi", trtllm_version="1.1.0", engine_dir=None, streaming=True)
    render_all([spec], tmp_path)
    result = load_check(tmp_path / spec.name)
    assert result["ok"], result
    assert result["smoke"]["tensorrt_llm"]["stream_chunks"] > 1
