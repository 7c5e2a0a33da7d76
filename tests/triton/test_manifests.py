"""Kubernetes manifests: real schemas (kubernetes-validate --strict), GPUs = TP x PP, placement, probes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.triton.manifests import build_manifests, validate_objects
from bootstrap.triton.source_listing import source_files
from bootstrap.triton.weights_version import (
    ANNOTATION,
    load_record,
    record_delivery,
    save_record,
    served_specs,
    version_id,
)
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


def test_a_drain_evicts_one_replica_at_a_time_replicas_prefer_different_nodes_and_a_stopping_pod_serves_on():
    """The budget selects exactly the Deployment's pods and lets one go at a time (not minAvailable: a
    one-replica model's node can still be drained); the anti-affinity spreads replicas by node but is only
    preferred, so GPUs on one node still take every replica."""
    spec = make_spec(deployment={"replicas": 2})
    objects = build_manifests(spec)["deployment.yaml"]
    assert validate_objects(objects) == []
    kinds = _by_kind(objects)
    budget = kinds[("PodDisruptionBudget", "triton-llama3-8b")]
    dep = kinds[("Deployment", "triton-llama3-8b")]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert budget["apiVersion"] == "policy/v1" and budget["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    affinity = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity
    (term,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"] == dep["spec"]["selector"]
    # a stopping pod serves on while the Service drops it, within its grace period
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 10
    # every model has its own budget and spread: another model's pods are not counted
    other = _by_kind(build_manifests(make_spec(name="other"))["deployment.yaml"])
    assert other[("PodDisruptionBudget", "triton-other")]["spec"]["selector"] != budget["spec"]["selector"]


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


def _delivered_spec(tmp_path: Path, **storage):
    source = tmp_path / "build-host" / "llama3-8b"
    source.mkdir(parents=True, exist_ok=True)
    overrides = {"trtllm_version": "26.07", "engine_dir": None, "source_dir": str(source)}
    return make_spec(**overrides, deployment={"storage": storage} if storage else {}), source


def _deliver_to_record(state: Path, spec, source: Path) -> str:
    """What `rackctl triton deliver` records once every serving node holds the source's files."""
    files = source_files(source)
    vid = version_id(files)
    models = load_record(state)
    record_delivery(models, spec, vid, files, {"gpu-01": [vid]}, ["gpu-01"])
    save_record(state, models)
    return vid


def _pod_template(state: Path, spec) -> dict:
    [served] = served_specs([spec], state)
    objects = build_manifests(served)["deployment.yaml"]
    assert validate_objects(objects) == []
    return next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]


def test_new_weights_change_the_pod_template_and_the_same_weights_do_not(tmp_path: Path):
    """The Deployment names the delivered version: rendered twice for the same files, the pod template is
    the same (no rollout); for new files it differs (Kubernetes rolls it), and the configs name the new
    version's directory."""
    spec, source = _delivered_spec(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (source / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (source / "model.safetensors").write_bytes(b"\x01" * 4096)
    first = _deliver_to_record(state, spec, source)
    template = _pod_template(state, spec)
    assert template == _pod_template(state, spec)
    assert template["metadata"]["annotations"][ANNOTATION] == first
    (source / "model.safetensors").write_bytes(b"\x02" * 4096)  # same size, new bytes
    second = _deliver_to_record(state, spec, source)
    assert second != first
    rolled = _pod_template(state, spec)
    assert rolled != template and rolled["metadata"]["annotations"][ANNOTATION] == second
    [served] = served_specs([spec], state)
    assert served.hf_model_dir == f"{spec.hf_model_dir}@{second}"
    assert served.node_dest == f"{spec.node_dest}@{second}"  # the directory delivery filled on each node
    volumes = {v["name"]: v for v in rolled["spec"]["volumes"]}
    assert volumes["weights"]["hostPath"]["path"] == spec.deployment.storage.node_dir


def test_a_model_without_a_delivered_version_is_refused_naming_the_field_and_the_command(tmp_path: Path):
    """`rackctl triton manifests` for a model with source_dir: never delivered, or changed since its
    delivery, the render refuses (exit 2) rather than point the Deployment at files not on the nodes."""
    spec, source = _delivered_spec(tmp_path)
    models = tmp_path / "models.yml"
    models.write_text(yaml.safe_dump({"models": [spec.model_dump(exclude_none=True)]}))
    state = tmp_path / "state"
    args = ["triton", "manifests", "--models", str(models), "--state-dir", str(state), "--json", "--plan"]
    (source / "config.json").write_text("{}")
    for step in ("never delivered", "changed since"):
        if step == "changed since":
            state.mkdir()
            _deliver_to_record(state, spec, source)
            (source / "tokenizer.json").write_text("{}")
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        [error] = json.loads(result.output)["errors"]
        assert error["path"] == "models[llama3-8b].source_dir", error
        assert error["fix"] == "run `rackctl triton deliver --model llama3-8b`, then render again"
    (source / "tokenizer.json").unlink()
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["models"][0]["weights_version"] == version_id(source_files(source))


def test_nfs_and_placed_models_have_no_rackctl_version_and_say_so():
    """An NFS export is read in place, a model without source_dir was placed beforehand: the configs name
    hf_model_dir as declared and the pod template says why there is no version."""
    nfs = make_spec(deployment={"storage": {"kind": "nfs", "nfs_server": "powerscale.lab", "nfs_path": "/ifs/ai"}})
    for spec, why in ((nfs, "NFS export"), (make_spec(), "placed on the nodes beforehand")):
        [served] = served_specs([spec], Path("/nonexistent-state"))
        assert served.hf_model_dir == spec.hf_model_dir
        template = next(o for o in build_manifests(served)["deployment.yaml"] if o["kind"] == "Deployment")
        assert why in template["spec"]["template"]["metadata"]["annotations"][ANNOTATION]
