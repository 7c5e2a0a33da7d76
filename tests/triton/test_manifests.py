"""Kubernetes manifests: real schemas (kubernetes-validate --strict), GPUs = TP x PP, placement, probes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.triton.manifests import build_manifests, validate_objects
from tests.triton.conftest import make_spec


def _by_kind(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_manifests_pass_strict_validation_and_carry_the_model():
    spec = make_spec(tensor_parallelism=4, pipeline_parallelism=2, deployment={"gpu_product": "NVIDIA-H100-SXM"})
    objects = build_manifests(spec)["deployment.yaml"]
    assert validate_objects(objects) == []
    kinds = _by_kind(objects)
    dep = kinds[("Deployment", "triton-llama3-8b")]
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "--world_size=8" in container["command"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-SXM"}
    assert container["image"] == "nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    ports = {p["name"] for s in objects if s["kind"] == "Service" for p in s["spec"]["ports"]}
    assert ports == {"http", "grpc", "metrics"}
    # No claim: the model's files are the node's data directory, mounted read-only where the configs point.
    assert not {k for k in kinds if k[0] in ("PersistentVolumeClaim", "PersistentVolume")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["weights"]["hostPath"] == {"path": "/mnt/nvme/rackctl-models", "type": "Directory"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["weights"] == {"name": "weights", "mountPath": "/models", "readOnly": True}
    assert spec.hf_model_dir.startswith("/models/") and spec.engine_dir.startswith("/models/")


def test_nfs_share_is_mounted_read_only_where_the_configs_point():
    spec = make_spec(deployment={"storage": {"kind": "nfs", "nfs_server": "powerscale.lab", "nfs_path": "/ifs/ai"}})
    objects = build_manifests(spec)["deployment.yaml"]
    assert validate_objects(objects) == []
    assert not [o for o in objects if o["kind"] in ("PersistentVolumeClaim", "PersistentVolume")]
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["weights"]["nfs"] == {"server": "powerscale.lab", "path": "/ifs/ai", "readOnly": True}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["weights"] == {"name": "weights", "mountPath": "/models", "readOnly": True}


def test_model_paths_outside_the_mount_and_the_old_empty_claim_are_refused(tmp_path: Path):
    models = tmp_path / "models.yml"
    entry = "  - {name: a, trtllm_version: '26.07', hf_model_dir: /data/m%s}\n"
    for extra, path, words in (
        ("", "models[0]", "hf_model_dir /data/m is outside deployment.storage.mount_path /models"),
        (
            ", deployment: {storage: {kind: local-path}}",
            "models[0].deployment.storage",
            "storage.kind 'local-path' gave each pod an empty claim",
        ),
    ):
        models.write_text("models:\n" + entry % extra)
        result = CliRunner().invoke(cli, ["triton", "manifests", "--models", str(models), "--json", "--plan"])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        error = json.loads(result.output)["errors"][0]
        assert error["path"] == path and words in error["message"], error
        assert error["fix"] and "write a value" not in error["fix"]


def test_strict_validation_catches_a_misspelt_field():
    objects = build_manifests(make_spec())["deployment.yaml"]
    dep = copy.deepcopy(next(o for o in objects if o["kind"] == "Deployment"))
    dep["spec"]["template"]["spec"]["nodeSelecter"] = dep["spec"]["template"]["spec"].pop("nodeSelector")
    problems = validate_objects([dep])
    assert len(problems) == 1
    assert "nodeSelecter" in problems[0].message


def test_service_monitor_selects_the_metrics_service():
    files = build_manifests(make_spec())
    monitor = files["servicemonitor.yaml"][0]
    metrics = next(o for o in files["deployment.yaml"] if o["metadata"]["name"].endswith("-metrics"))
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(metrics["metadata"]["labels"].get(k) == v for k, v in selector.items())
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_cli_manifests_dry_run_then_write(tmp_path: Path):
    models = tmp_path / "models.yml"
    models.write_text(
        "models:\n  - {name: a, trtllm_version: '0.14.0', "
        "hf_model_dir: /models/m, engine_dir: /models/e, tensor_parallelism: 2}\n"
    )
    out = tmp_path / "out"
    args = ["triton", "manifests", "--models", str(models), "--out", str(out), "--json"]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert not out.exists()
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["models"][0]["gpus"] == 2
    docs = list(yaml.safe_load_all((out / "a" / "k8s" / "deployment.yaml").read_text()))
    assert any(d["kind"] == "Deployment" for d in docs)
