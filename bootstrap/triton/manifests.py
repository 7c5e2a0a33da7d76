"""Kubernetes manifests per model: repository ConfigMap, Deployment (GPUs = TP x PP), Services, a
PodDisruptionBudget, ServiceMonitor, and for a model with ``deployment.autoscaling`` a KEDA ScaledObject.

Day-2 work drains nodes (firmware, driver upgrades, redeploys). The replicas are spread over the GPU nodes where
the GPUs allow it (a preferred anti-affinity by hostname) and the budget lets a drain evict one replica at a
time (:data:`MAX_UNAVAILABLE`): a drain of a node holding two replicas waits until the first one's replacement
is ready elsewhere, so a model with two or more replicas keeps serving through a rollout; a stopping pod
serves on for :data:`PRE_STOP_S` while the Service drops it.

The rendered repository travels in ConfigMap ``<model>-repository``; the Deployment's initContainer copies it
to where Triton loads it (:mod:`bootstrap.triton.repository_volume`). The model's files are mounted read-only
at ``deployment.storage.mount_path`` from where they are: the node's ``node_dir`` (hostPath) or the NFS export.
A delivered model's configs name its version directory below that mount (``<hf_model_dir>@<id>``, from
:func:`bootstrap.triton.weights_version.served_spec`), and the pod template carries the id
(:data:`~bootstrap.triton.weights_version.ANNOTATION`): new files are a new pod template, hence a rolling update.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bootstrap.errors import EnvironmentMissing, Problem
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.autoscaling import Scaling
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.inventory.trtllm import version_info
from bootstrap.triton import repository_volume as repo_volume
from bootstrap.triton.render import render_model
from bootstrap.triton.weights_version import ANNOTATION as WEIGHTS_ANNOTATION
from bootstrap.triton.weights_version import annotation as weights_annotation

LAUNCH_SCRIPT = Path(__file__).parent / "templates" / "k8s" / "rackctl_launch.py"
LAUNCH_MOUNT = "/opt/rackctl"
DEFAULT_K8S_VERSION = "1.30"
#: The Prometheus label the ServiceMonitor puts on every Triton series: the rackctl model (the Service's
#: ``app.kubernetes.io/instance``); the Triton dashboard groups by it.
MODEL_LABEL = "rackctl_model"
#: Triton's readiness endpoint: a pod receives traffic only once every model is loaded.
READY_PATH = "/v2/health/ready"
#: The Triton model whose queue the autoscaling reads: the TensorRT-LLM model of either layout (the engine
#: layout's ensemble, pre- and postprocessing would count each request again).
QUEUED_MODEL = "tensorrt_llm"
#: KEDA's API (its ``ScaledObject``), served once the keda chart has installed its CRDs.
KEDA_API = "keda.sh/v1alpha1"
#: How often KEDA asks Prometheus (seconds): the ServiceMonitor's scrape interval.
POLLING_INTERVAL_S = 15
#: How long a stopping Triton pod keeps serving before tritonserver is told to stop (its preStop hook): the
#: Service's endpoints, kube-proxy on every node and the API server's service proxy drop the pod meanwhile, so
#: no request reaches a server that is going away. Within the pod's 60 s grace period.
PRE_STOP_S = 10
#: The model's PodDisruptionBudget: evictions (drains) take one replica at a time. A number, not a
#: ``minAvailable``: with one replica a drain still proceeds (that model is down meanwhile, as it would be
#: anyway), where ``minAvailable: 1`` would block every drain of its node.
MAX_UNAVAILABLE = 1


def _labels(spec: ModelSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": "triton", "app.kubernetes.io/instance": spec.name}


def _meta(spec: ModelSpec, name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": spec.deployment.namespace, "labels": {**_labels(spec), **labels}}


def weights_volume(spec: ModelSpec) -> dict[str, Any]:
    """The pod volume holding the model's files: hostPath of the node's ``node_dir`` (kind node; it must
    exist, filled by ``rackctl triton deliver`` (one directory per version) or beforehand) or the NFS
    export, read-only (kind nfs)."""
    storage = spec.deployment.storage
    if storage.kind == "nfs":
        return {"name": "weights", "nfs": {"server": storage.nfs_server, "path": storage.nfs_path, "readOnly": True}}
    return {"name": "weights", "hostPath": {"path": storage.node_dir, "type": "Directory"}}


def launch_command(spec: ModelSpec) -> list[str]:
    """The container command: rackctl's launcher starts tritonserver under mpirun with the world size."""
    dep = spec.deployment
    world = spec.world_size if spec.layout == "inflight_batcher_llm" else 1  # LLM API spawns its own ranks
    return [
        "python3",
        f"{LAUNCH_MOUNT}/rackctl_launch.py",
        f"--world_size={world}",
        f"--model_repo={repo_volume.repository_path(spec)}",
        f"--http_port={dep.http_port}",
        f"--grpc_port={dep.grpc_port}",
        f"--metrics_port={dep.metrics_port}",
    ]


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures}


def deployment(spec: ModelSpec, repository: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Triton Deployment: GPUs = TP x PP on nodes with the declared GPU product; ``repository``: the
    model's repository ConfigMap (built when not given), copied by the initContainer, its digest annotating
    the pod template."""
    dep = spec.deployment
    repository = repository or repository_config_map(spec)
    gpus = str(spec.world_size)
    image = version_info(spec.trtllm_version).image
    container = {
        "name": "triton",
        "image": image,
        "command": launch_command(spec),
        "ports": [
            {"name": "http", "containerPort": dep.http_port, "protocol": "TCP"},
            {"name": "grpc", "containerPort": dep.grpc_port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": dep.metrics_port, "protocol": "TCP"},
        ],
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
        "startupProbe": _probe(READY_PATH, 10, 90),
        "readinessProbe": _probe(READY_PATH, 5, 3),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRE_STOP_S)]}}},
        "volumeMounts": [
            {"name": "weights", "mountPath": dep.storage.mount_path, "readOnly": True},
            {"name": "launcher", "mountPath": LAUNCH_MOUNT, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},  # noqa: S108 - NCCL/MPI shared memory, not a temp file
            {"name": "model-repository", "mountPath": repo_volume.REPOSITORY_ROOT, "readOnly": True},
        ],
    }
    # An autoscaled Deployment names no replicas: the HPA KEDA makes owns the count (docs/serving.md).
    replicas = {} if dep.autoscaling is not None else {"replicas": dep.replicas}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(spec, f"triton-{spec.name}"),
        "spec": {
            **replicas,
            "selector": {"matchLabels": _labels(spec)},
            # One new pod ready before an old one stops: serving continues during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": _labels(spec),
                    "annotations": {
                        repo_volume.DIGEST_ANNOTATION: repo_volume.digest_of(repository),
                        WEIGHTS_ANNOTATION: weights_annotation(spec),
                    },
                },
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": dep.gpu_product},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": _spread(spec),
                    "terminationGracePeriodSeconds": 60,
                    "initContainers": [repo_volume.copier_container(spec, image, LAUNCH_MOUNT)],
                    "containers": [container],
                    "volumes": [
                        weights_volume(spec),
                        {"name": "launcher", "configMap": {"name": f"{spec.name}-launcher"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": dep.shm_size}},
                        repo_volume.source_volume(repository),
                        {"name": "model-repository", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def _spread(spec: ModelSpec) -> dict[str, Any]:
    """Replicas on different nodes where the GPUs allow (preferred: never leaves a replica unscheduled)."""
    term = {"labelSelector": {"matchLabels": _labels(spec)}, "topologyKey": "kubernetes.io/hostname"}
    preferred = [{"weight": 100, "podAffinityTerm": term}]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}


def disruption_budget(spec: ModelSpec) -> dict[str, Any]:
    """PodDisruptionBudget ``triton-<model>``: drains evict one replica at a time (:data:`MAX_UNAVAILABLE`)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(spec, f"triton-{spec.name}"),
        "spec": {"maxUnavailable": MAX_UNAVAILABLE, "selector": {"matchLabels": _labels(spec)}},
    }


def rolling_update_problems(deployment: dict[str, Any]) -> list[str]:
    """Why a rollout of ``deployment`` could drop the service (empty when it cannot).

    A new pod must be ready before an old one stops: ``RollingUpdate`` with ``maxSurge`` >= 1 and
    ``maxUnavailable`` 0, and readiness judged by ``/v2/health/ready`` (a pod whose models are still loading
    gets no traffic).
    """
    spec = deployment.get("spec", {})
    strategy = spec.get("strategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    where = f"Deployment {deployment.get('metadata', {}).get('name')}"
    problems = []
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        problems.append(f"{where}: strategy {strategy.get('type')} stops every pod before starting new ones")
    surge, unavailable = str(rolling.get("maxSurge", "25%")), str(rolling.get("maxUnavailable", "25%"))
    if surge in ("0", "0%"):
        problems.append(f"{where}: maxSurge {surge} starts no new pod before an old one stops (needs >= 1)")
    if unavailable not in ("0", "0%"):
        problems.append(f"{where}: maxUnavailable {unavailable} lets old pods stop before new ones are ready (needs 0)")
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    probes = [c.get("readinessProbe", {}).get("httpGet", {}).get("path") for c in containers]
    if READY_PATH not in probes:
        problems.append(f"{where}: no readinessProbe on {READY_PATH} (found {probes})")
    return problems


def services(spec: ModelSpec) -> list[dict[str, Any]]:
    """A Service for HTTP + gRPC, and one for metrics the ServiceMonitor selects.

    Every port names its ``protocol`` (the default, TCP): ``(port, protocol)`` keys the list for server-side
    apply, and a 1.20 API server refuses an applied port without it ("associative list with keys has an
    element that omits key field protocol"); container ports likewise."""
    dep = spec.deployment
    serving = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, f"triton-{spec.name}"),
        "spec": {
            "selector": _labels(spec),
            "ports": [
                {"name": "http", "port": dep.http_port, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": dep.grpc_port, "targetPort": "grpc", "protocol": "TCP"},
            ],
        },
    }
    metrics = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, f"triton-{spec.name}-metrics", **{"rackctl.io/metrics": "triton"}),
        "spec": {
            "selector": _labels(spec),
            "ports": [{"name": "metrics", "port": dep.metrics_port, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }
    return [serving, metrics]


def service_monitor(spec: ModelSpec) -> dict[str, Any]:
    """Prometheus Operator ServiceMonitor scraping Triton's metrics port; every series gets the label
    :data:`MODEL_LABEL` with the rackctl model's name (Triton names an ``llmapi`` model ``tensorrt_llm`` in
    every repository, so its own ``model`` label cannot tell two rackctl models apart)."""
    relabel = {
        "sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_instance"],
        "targetLabel": MODEL_LABEL,
        "action": "replace",
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(spec, f"triton-{spec.name}", release="kube-prometheus-stack"),
        "spec": {
            "selector": {"matchLabels": {**_labels(spec), "rackctl.io/metrics": "triton"}},
            "namespaceSelector": {"matchNames": [spec.deployment.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "relabelings": [relabel]}],
        },
    }


def queue_selector(spec: ModelSpec) -> str:
    """The PromQL label matchers of the model's own queue: its namespace, :data:`MODEL_LABEL` and the
    Triton model doing the work (:data:`QUEUED_MODEL`)."""
    return f'{{namespace="{spec.deployment.namespace}",{MODEL_LABEL}="{spec.name}",model="{QUEUED_MODEL}"}}'


def _threshold(value: float) -> str:
    return f"{value:g}"


def scaled_object(spec: ModelSpec, scaling: Scaling) -> dict[str, Any]:
    """KEDA ScaledObject scaling Deployment ``triton-<model>`` between the resolved bounds on Triton's queue.

    Trigger ``pending-requests``: the model's ``nv_inference_pending_request_count`` summed over its pods,
    as an ``AverageValue`` (the HPA divides by the replicas) against ``pending_requests_per_replica``. With
    ``queue_duration_us``, trigger ``queue-time``: the mean time a request waited in the queue over
    ``window`` (the counter ``nv_inference_queue_duration_us``'s rate over the rate of finished requests;
    no request in the window reads 0), as a ``Value``. The HPA follows the trigger asking for most pods."""
    where = queue_selector(spec)
    server = scaling.prometheus_url
    triggers: list[dict[str, Any]] = [
        {
            "type": "prometheus",
            "name": "pending-requests",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": server,
                "query": f"sum(nv_inference_pending_request_count{where})",
                "threshold": _threshold(scaling.pending_requests_per_replica),
            },
        }
    ]
    if scaling.queue_duration_us is not None:
        window = scaling.window
        query = (
            f"sum(rate(nv_inference_queue_duration_us{where}[{window}])) / "
            f"(sum(rate(nv_inference_request_success{where}[{window}])) > 0) or vector(0)"
        )
        triggers.append(
            {
                "type": "prometheus",
                "name": "queue-time",
                "metricType": "Value",
                "metadata": {"serverAddress": server, "query": query, "threshold": str(scaling.queue_duration_us)},
            }
        )
    behavior = {"scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_stabilization_s}}
    return {
        "apiVersion": KEDA_API,
        "kind": "ScaledObject",
        "metadata": _meta(spec, f"triton-{spec.name}"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"triton-{spec.name}"},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": POLLING_INTERVAL_S,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": triggers,
        },
    }


def launcher_config_map(spec: ModelSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(spec, f"{spec.name}-launcher"),
        "data": {
            LAUNCH_SCRIPT.name: LAUNCH_SCRIPT.read_text(),
            repo_volume.COPIER_SCRIPT.name: repo_volume.COPIER_SCRIPT.read_text(),
        },
    }


def repository_config_map(spec: ModelSpec) -> dict[str, Any]:
    """ConfigMap ``<model>-repository``: the model's rendered repository (refused over Kubernetes' 1 MiB)."""
    meta = _meta(spec, repo_volume.config_map_name(spec))
    return repo_volume.repository_config_map(spec, render_model(spec), meta)


def build_manifests(spec: ModelSpec, scaling: Scaling | None = None) -> dict[str, list[dict[str, Any]]]:
    """File name -> Kubernetes objects for one model (built-in kinds apart from the ServiceMonitor and the
    ScaledObject, ``scaledobject.yaml``, rendered when ``scaling``, the model's resolved autoscaling, is given:
    :func:`bootstrap.inventory.autoscaling.resolve`)."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.deployment.namespace}}
    repository = repository_config_map(spec)
    core = [
        namespace,
        launcher_config_map(spec),
        repository,
        deployment(spec, repository),
        *services(spec),
        disruption_budget(spec),
    ]
    files = {"deployment.yaml": core, "servicemonitor.yaml": [service_monitor(spec)]}
    if scaling is not None:
        files["scaledobject.yaml"] = [scaled_object(spec, scaling)]
    return files


def validate_objects(objects: list[dict[str, Any]], k8s_version: str = DEFAULT_K8S_VERSION) -> list[Problem]:
    """``kubernetes-validate --strict`` against the real schemas of ``k8s_version``."""
    try:
        import kubernetes_validate  # noqa: PLC0415 - the `cluster` extra, loads schemas slowly
    except ImportError:
        raise EnvironmentMissing(
            "validating Triton's Kubernetes manifests needs kubernetes-validate, not installed",
            problems=[Problem("kubernetes-validate", "not importable", "pip install 'rackctl[cluster]'")],
        ) from None

    problems = []
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(Problem(f"{where}.{path}", exc.message, "report a rackctl bug"))
    return problems


def write_manifests(
    specs: list[ModelSpec],
    out_dir: Path,
    *,
    dry_run: bool = False,
    k8s_version: str = DEFAULT_K8S_VERSION,
    scaling: dict[str, Scaling] | None = None,
) -> list[dict[str, Any]]:
    """Write ``<out>/<model>/k8s/*.yaml`` per model (validated first); return what was (to be) written.

    ``scaling``: model name -> resolved autoscaling (from the inventory); an autoscaled model without it (a
    ``--models`` file has no monitoring or sizing to resolve it with) gets no ScaledObject, said in its result.
    """
    results = []
    for spec in specs:
        resolved = (scaling or {}).get(spec.name)
        files = build_manifests(spec, resolved)
        problems = validate_objects(files["deployment.yaml"], k8s_version)
        paths = []
        for name, objects in files.items():
            path = out_dir / spec.name / "k8s" / name
            paths.append(str(path))
            if not dry_run and not problems:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, yaml.safe_dump_all(objects, sort_keys=False))
        result: dict[str, Any] = {
            "model": spec.name,
            "files": paths,
            "gpus": spec.world_size,
            "weights_version": weights_annotation(spec),
            "problems": [p.as_dict() for p in problems],
        }
        if spec.deployment.autoscaling is not None and resolved is None:
            result["not_rendered"] = (
                "ScaledObject: deployment.autoscaling is resolved from the inventory (monitoring, sizing); "
                "render from the inventory, not a models file"
            )
        results.append(result)
    return results
