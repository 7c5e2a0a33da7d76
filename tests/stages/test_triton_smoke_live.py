"""The triton stage's smoke and ``rackctl triton smoke --service``: through the real kube-apiserver 1.37.2's
service proxy to a real tritonserver.

Real parts: the CLI (click, ``--json``), the runner and SQLite journal, the triton stage (render, checks, live
apply, rollout watch, smoke), ``kubectl`` (``kubectl proxy``) on PATH, the API server of
tests/cluster/apiserver.py and its service proxy, and tritonserver from the nvidia-pytriton wheel serving a
rendered streaming in-flight-batcher repository (its GPU-only ``tensorrt_llm`` replaced by the stand-in) on a
non-loopback address of this host (``triton_backend``, tests/stages/conftest.py). No kubelet, scheduler,
Deployment or endpoints controller runs: :class:`tests.triton_serving.ServingStandIn` stands in for them (the
Triton pod Running with this host's address, the Service's Endpoints listing it, the Deployment rolled out).
Both inventory models' Services lead to that one tritonserver.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_FAILED, EXIT_INVALID, EXIT_NOT_APPLIED
from bootstrap.journal.store import Journal
from bootstrap.kube import KubeError
from bootstrap.kube.service_proxy import KubectlProxy
from bootstrap.triton.server import TritonServer
from tests.cluster.apiserver import ApiServer
from tests.kube_objects import KubeObjects, crd_absent
from tests.triton_serving import ServingStandIn, serve

pytestmark = [
    pytest.mark.slow,
]
EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
PLAIN, STREAMING = "llama-2-13b-awq", "llama-2-70b-fp8"  # the example's models: generate only / streaming
SERVICES = [f"triton-{PLAIN}", f"triton-{STREAMING}"]
MONITORS = "servicemonitors.monitoring.coreos.com"


def _inventory(tmp_path: Path, namespace: str, *, llmapi: str | None = None) -> Path:
    """The example inventory, its models in ``namespace`` on the in-flight-batcher layout (what the served
    stand-in is); ``llmapi``: that model kept on the example's LLM API layout (the smoke then asks
    ``tensorrt_llm``, which the served in-flight-batcher repository has with other inputs)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    for model in data["models"]:
        model["deployment"]["namespace"] = namespace
        if model["name"] != llmapi:  # the served stand-in is an in-flight-batcher repository (release 1.1.0)
            model |= {"layout": "inflight_batcher_llm", "engine_dir": f"/models/engines/{model['name']}"}
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def _up(inventory: Path, state_dir: Path) -> tuple[int, dict[str, Any]]:
    args = ["up", "-i", str(inventory), "--state-dir", str(state_dir), "--stages", "triton", "--triton-timeout", "60"]
    code, doc = _run(*args)
    return code, next(s for s in doc["stages"] if s["name"] == "triton")


def _serving(kube: KubeObjects, namespace: str, backend: tuple[str, TritonServer]) -> ServingStandIn:
    """The stand-in controllers and kubelet: both models' Services lead to the one real tritonserver."""
    address, server = backend
    return ServingStandIn(kube, namespace, SERVICES, address=address, port=server.http_port)


def _up_without_monitors(
    kube_apiserver: ApiServer, stand_in: ServingStandIn, inventory: Path, state_dir: Path
) -> tuple[int, dict[str, Any]]:
    """:func:`_up` while ``stand_in`` serves and the API server does not serve the ServiceMonitor CRD."""
    with crd_absent(kube_apiserver, MONITORS), stand_in:
        return _up(inventory, state_dir)


def _successes(server: TritonServer, model: str) -> float:
    """tritonserver's own count of successful requests of ``model`` (its metrics port)."""
    with urllib.request.urlopen(f"http://{server.address}:{server.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    pattern = rf'^nv_inference_request_success{{model="{model}",version="1"}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE))


def test_up_smokes_each_model_through_its_service_and_records_ttft(
    live_state: tuple[Path, str],
    kube: KubeObjects,
    kube_apiserver: ApiServer,
    triton_backend: tuple[str, TritonServer],
    tmp_path: Path,
) -> None:
    state_dir, namespace = live_state
    server = triton_backend[1]
    before = _successes(server, "ensemble")
    stand_in = _serving(kube, namespace, triton_backend)
    code, stage = _up_without_monitors(kube_apiserver, stand_in, _inventory(tmp_path, namespace), state_dir)
    assert sorted(stand_in.served) == sorted(SERVICES)

    assert code == EXIT_NOT_APPLIED, stage
    assert stage["status"] == "rendered" and stage["applied"] is False
    message = stage["message"]
    assert f"{PLAIN}: deployed, ready 1/1" in message and f"{STREAMING}: deployed, ready 1/1" in message
    assert "each smoke-tested through its Service (kubectl proxy -> the API server's service proxy)" in message
    # not "done": the ServiceMonitors were left out (no CRD); the smoke part says what it measured
    assert "not applied: objects not applied: " in message and "repositories not copied" not in message
    assert re.search(rf"{PLAIN}: latency \d+ ms \(no TTFT: the model does not stream\)", message), message
    assert re.search(rf"{STREAMING}: TTFT \d+ ms, latency \d+ ms \(stream \d+ ms, \d+ events\)", message), message

    smoke = stage["data"]["smoke"]
    streamed = smoke[STREAMING]
    assert streamed["ok"] is True and streamed["errors"] == []
    assert streamed["service"] == f"{namespace}/triton-{STREAMING}:http"
    assert streamed["path"] == f"/api/v1/namespaces/{namespace}/services/triton-{STREAMING}:http/proxy/"
    assert streamed["triton_model"] == "ensemble" and streamed["streaming"] is True
    assert 0 < streamed["ttft_s"] <= streamed["stream_latency_s"] and streamed["latency_s"] > 0
    assert streamed["stream_events"] > 1  # server-sent events pass the service proxy, one per token
    plain = smoke[PLAIN]
    assert plain["ok"] is True and plain["ttft_s"] is None and plain["latency_s"] > 0
    assert plain["stream_events"] == 0  # generate only: the model does not stream
    # the requests reached the real tritonserver: 3 ensemble requests (2 generate, 1 generate_stream)
    assert _successes(server, "ensemble") - before == 3

    with Journal(state_dir, readonly=True) as journal:
        facts = journal.latest_facts("gpu-l40s-01")["triton"]["smoke"]
        steps = [s for s in journal.steps(node="head-01") if s.stage == "triton"]
    assert facts[STREAMING]["ttft_s"] == streamed["ttft_s"] and facts[PLAIN]["ok"] is True
    assert steps[-1].status == "rendered"


def test_a_service_without_endpoints_fails_the_stage_naming_model_and_service(
    live_state: tuple[Path, str], kube: KubeObjects, kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    state_dir, namespace = live_state
    # the endpoints controller's Endpoints of a Service no ready pod backs: no address
    stand_in = ServingStandIn(kube, namespace, SERVICES, address="192.0.2.1", port=1, endpoints=False)
    code, stage = _up_without_monitors(kube_apiserver, stand_in, _inventory(tmp_path, namespace), state_dir)
    assert code == EXIT_FAILED, stage
    assert stage["status"] == "failed"
    for model in (PLAIN, STREAMING):
        why = (
            f"{model}: smoke failed against Service {namespace}/triton-{model} port http, via kubectl proxy -> the "
            f'API server\'s service proxy: ready: HTTP 503: no endpoints available for service "triton-{model}"'
        )
        assert why in stage["message"], stage["message"]
        assert stage["data"]["smoke"][model]["ok"] is False
    assert f"{PLAIN}: deployed, ready 1/1" in stage["message"]  # what was deployed is still said
    with Journal(state_dir, readonly=True) as journal:
        steps = [s for s in journal.steps(node="head-01") if s.stage == "triton"]
        facts = journal.latest_facts("head-01")["triton"]["smoke"]
    assert steps[-1].status == "failed" and "no endpoints available" in steps[-1].detail["error"]
    assert facts[STREAMING]["ok"] is False


def test_a_model_answering_errors_fails_the_stage_with_tritons_words(
    live_state: tuple[Path, str],
    kube: KubeObjects,
    kube_apiserver: ApiServer,
    triton_backend: tuple[str, TritonServer],
    tmp_path: Path,
) -> None:
    state_dir, namespace = live_state
    inventory = _inventory(tmp_path, namespace, llmapi=PLAIN)
    code, stage = _up_without_monitors(kube_apiserver, _serving(kube, namespace, triton_backend), inventory, state_dir)
    assert code == EXIT_FAILED, stage
    assert stage["status"] == "failed"
    message = stage["message"]
    assert f"{PLAIN}: smoke failed against Service {namespace}/triton-{PLAIN} port http" in message
    # Triton's own answer: the served tensorrt_llm takes token ids, not text
    assert "generate: HTTP 400: " in message and "missing required input(s) ['input_ids'" in message
    assert f"{STREAMING}: smoke failed" not in message
    smoke = stage["data"]["smoke"]
    assert smoke[PLAIN]["triton_model"] == "tensorrt_llm" and smoke[PLAIN]["ok"] is False
    assert smoke[PLAIN]["model_ready"] is True  # loaded: what failed is the request, in Triton's words
    assert smoke[STREAMING]["ok"] is True and smoke[STREAMING]["ttft_s"] > 0


def test_plan_says_the_smoke_will_run_per_model(live_state: tuple[Path, str], tmp_path: Path) -> None:
    state_dir, namespace = live_state
    args = ["plan", "-i", str(_inventory(tmp_path, namespace)), "--state-dir", str(state_dir), "--stages", "triton"]
    code, doc = _run(*args)
    assert code == 0, doc
    # with a kubeconfig the stage applies: plan does not count it among the stages that only render
    assert doc["not_applied"] == [] and doc["stages"][0]["applies"] is True, doc
    texts = [a["action"] for s in doc["stages"] for a in s["actions"]]
    assert any(t.startswith("kubectl apply --server-side") and "smoke not run" not in t for t in texts), texts
    want = (
        f"`rackctl triton smoke` of {STREAMING} once its Deployment is ready: Service {namespace}/triton-{STREAMING} "
        f"through the API server's service proxy (/api/v1/namespaces/{namespace}/services/triton-{STREAMING}:http/"
        "proxy/), model ensemble, generate and generate_stream"
    )
    assert any(t.startswith(want) for t in texts), texts
    assert any(f"of {PLAIN} once" in t and "generate (the model does not stream)" in t for t in texts), texts


def test_triton_smoke_cli_reaches_a_service_through_the_api_server(
    kube: KubeObjects, kube_apiserver: ApiServer, triton_backend: tuple[str, TritonServer], tmp_path: Path
) -> None:
    address, server = triton_backend
    namespace = kube.namespace("cli")
    spec = {"ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]}
    kube.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/services",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "triton"}, "spec": spec},
    )
    serve(kube, namespace, "triton", address, server.http_port)  # stands in for kubelet + endpoints controller
    state_dir = tmp_path / "state"
    kube_apiserver.write_kubeconfig(state_dir / "kubeconfig")

    smoke = ["triton", "smoke", "--service", f"{namespace}/triton", "--state-dir", str(state_dir)]
    code, data = _run(*smoke)
    assert code == 0, data
    assert data["ok"] is True and data["model"] == "ensemble"
    assert data["service"] == f"{namespace}/triton:http"
    assert data["url"] == f"/api/v1/namespaces/{namespace}/services/triton:http/proxy/"
    assert data["text"].startswith("What is the capital of Texas?")  # the stand-in echoes the prompt
    assert data["stream_chunks"] > 1 and 0 < data["ttft_s"] <= data["stream_latency_s"]

    # the human form names the Service and the path
    result = CliRunner().invoke(
        cli, ["triton", "smoke", "--service", f"{namespace}/triton", "--state-dir", str(state_dir)]
    )
    assert result.exit_code == 0, result.output
    assert f"ok Service {namespace}/triton:http" in result.output and "first token" in result.output

    # a model the server lacks: Triton's answer to /ready, then its repository's word, no request; exit 1
    code, data = _run(
        "triton", "smoke", "--service", f"{namespace}/triton", "--state-dir", str(state_dir), "--model", "x"
    )
    assert code == EXIT_FAILED and data["ok"] is False
    assert data["errors"] == [
        "ready: HTTP 400: Model version not ready; Triton's repository: no model x in its repository (it has "
        "ensemble, postprocessing, preprocessing, tensorrt_llm, tensorrt_llm_bls)"
    ]
    # a Service nothing serves (no EndpointSlice names it): the API server's 1.37 answer, said as such
    code, data = _run("triton", "smoke", "--service", f"{namespace}/nothing", "--state-dir", str(state_dir))
    assert code == EXIT_FAILED
    assert data["errors"] == ['ready: HTTP 503: no endpoints available for service "nothing"']  # not Triton's


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--service", "no-slash"], "--service", "NAMESPACE/NAME"),
        (["--service", "ns/Bad_Name"], "--service", "NAMESPACE/NAME"),
        (["--service", "ns/x", "--url", "127.0.0.1:8000"], "--url/--service", "only one"),
        (["--service", "ns/x"], "--state-dir", "--kubeconfig FILE"),
    ],
)
def test_triton_smoke_service_bad_input_names_the_option(
    args: list[str], field: str, words: str, tmp_path: Path
) -> None:
    code, data = _run("triton", "smoke", *args, "--state-dir", str(tmp_path / "empty"))
    assert code == EXIT_INVALID, data
    problem = data["errors"][0]
    assert problem["path"] == field and words in problem["fix"], problem


def test_kubectl_proxy_that_cannot_start_says_kubectls_words(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\ncurrent-context: missing\n")
    with pytest.raises(KubeError) as caught, KubectlProxy(broken):
        pass
    assert f"kubectl proxy did not start (kubeconfig {broken})" in caught.value.message
    assert "missing" in caught.value.message  # kubectl names the context it cannot find
