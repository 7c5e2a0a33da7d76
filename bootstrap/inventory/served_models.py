"""A served model as declared in the inventory's top-level ``models:`` list."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from bootstrap.inventory.trtllm import ENGINE_VERSIONS, SUPPORTED_VERSIONS, version_info

Precision = Literal["FP8", "FP16", "BF16", "FP32", "INT8", "INT4_AWQ", "AWQ", "GPTQ", "W8A8_SQ", "NVFP4"]
Layout = Literal["inflight_batcher_llm", "llmapi"]
BatchingStrategy = Literal["inflight_fused_batching", "inflight_batching", "V1"]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"
#: An absolute path safe to write into protobuf text and YAML unquoted-escape-free.
POD_PATH = r"^/[A-Za-z0-9._/@+-]*$"
#: Node trees a model directory must never be: a read-only hostPath would show them to the pod, and
#: delivery (as root) would write there.
SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/run", "/var/lib/kubelet", "/usr")


def no_parent_segments(value: str | None, info: ValidationInfo) -> str | None:
    """A path with ``..`` (or ``.``) segments points somewhere else than it reads: refused, naming it."""
    if value is not None and any(part in {".", ".."} for part in value.split("/")):
        raise ValueError(
            f"{info.field_name} {value} has a '.' or '..' segment (fix: write the directory it means, without them)"
        )
    return value


class KvCacheSpec(BaseModel):
    """Paged KV-cache settings of one model."""

    model_config = ConfigDict(extra="forbid")

    free_gpu_mem_fraction: float = Field(
        default=0.5, gt=0, le=1, description="Share of free GPU memory the KV cache may take (0 to 1]."
    )
    max_tokens: int = Field(default=2560, ge=1, description="max_tokens_in_paged_kv_cache: tokens the cache holds.")
    max_attention_window: int = Field(
        default=2560, ge=1, description="max_attention_window_size: tokens each sequence attends to."
    )
    enable_reuse: bool = Field(
        default=False, description="Reuse KV blocks across requests (needs an engine with paged context FMHA)."
    )


class StorageSpec(BaseModel):
    """Where the model's files (weights, tokenizer, engines) are for the pods: mounted read-only at
    ``mount_path``, where ``hf_model_dir`` / ``tokenizer_dir`` / ``engine_dir`` point."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["node", "nfs"] = Field(
        default="node",
        description="node: node_dir on each GPU node's NVMe data path (a hostPath; filled by `rackctl triton "
        "deliver` from source_dir, or placed there already); nfs: an NFS export on the storage network.",
    )
    node_dir: str = Field(
        default="/mnt/nvme/rackctl-models",
        pattern=POD_PATH,
        description="Directory on each GPU node mounted at mount_path (kind node).",
    )
    nfs_server: str | None = Field(default=None, description="NFS/PowerScale server name or address (kind nfs).")
    nfs_path: str | None = Field(default=None, description="Exported path on the NFS server, absolute (kind nfs).")
    mount_path: str = Field(default="/models", pattern=POD_PATH, description="Where the files are in the pod.")

    _plain_paths = field_validator("node_dir", "mount_path", "nfs_path")(no_parent_segments)

    @field_validator("nfs_path")
    @classmethod
    def _absolute_export(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(
                f"nfs_path {value} is not absolute (fix: the export's path as the server lists it, e.g. /ifs/models)"
            )
        return value

    @field_validator("node_dir")
    @classmethod
    def _not_a_system_tree(cls, value: str) -> str:
        path = value.rstrip("/") or "/"
        if path == "/" or any(path == tree or path.startswith(tree + "/") for tree in SYSTEM_TREES):
            raise ValueError(
                f"node_dir {value} is a system directory of the node: the pods would see it and delivery would "
                "write there (fix: a directory of its own on the NVMe data path, e.g. /mnt/nvme/rackctl-models)"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_empty_claim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "local-path":
            raise ValueError(
                "storage.kind 'local-path' gave each pod an empty claim the model files never reached; "
                "use kind: node (node_dir on each GPU node, filled by `rackctl triton deliver`) or kind: nfs"
            )
        return data

    @model_validator(mode="after")
    def _nfs_needs_server(self) -> StorageSpec:
        if self.kind == "nfs" and not (self.nfs_server and self.nfs_path):
            raise ValueError(
                "storage.nfs_server and storage.nfs_path are required when storage.kind is 'nfs' "
                "(fix: set both, or use kind: node)"
            )
        return self


#: A Prometheus range-vector window (``rate(...[1m])``).
PROM_WINDOW = r"^[1-9][0-9]*(s|m|h)$"


class AutoscalingSpec(BaseModel):
    """Replicas following demand: a KEDA ``ScaledObject`` on Triton's queue of the model's ``tensorrt_llm``
    model (Prometheus series labelled ``rackctl_model`` by the model's ServiceMonitor); docs/serving.md."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(
        default=1, description="Fewest Triton pods (at least 1: the model is never scaled to no pod)."
    )
    max_replicas: int | None = Field(
        default=None,
        description="Most Triton pods (>= min_replicas). Unset: the instances the inventory's sizing: placement "
        "gives this model (rackctl size --write).",
    )
    pending_requests_per_replica: float = Field(
        default=8,
        gt=0,
        description="Target of Triton's nv_inference_pending_request_count per pod (summed over the model's "
        "pods, divided by the replicas): more waiting requests per pod adds pods.",
    )
    queue_duration_us: int | None = Field(
        default=None,
        gt=0,
        description="Optional second target: mean time a request waits in Triton's queue, in microseconds "
        "(rate of nv_inference_queue_duration_us over rate of nv_inference_request_success, over window).",
    )
    window: str = Field(default="1m", pattern=PROM_WINDOW, description="Rate window of the queue-time query.")
    scale_down_stabilization_s: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="Seconds the HPA waits with demand low before removing pods "
        "(behavior.scaleDown.stabilizationWindowSeconds).",
    )

    @field_validator("min_replicas")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError(
                f"min_replicas {value} would scale the model to no pod: requests would find no server, and "
                "Triton's queue metrics, which scale it up again, would be gone with the pods "
                "(fix: min_replicas: 1 or more)"
            )
        return value

    @model_validator(mode="after")
    def _max_not_below_min(self) -> AutoscalingSpec:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas {self.max_replicas} is below min_replicas {self.min_replicas} "
                f"(fix: max_replicas {self.min_replicas} or more, or lower min_replicas)"
            )
        return self


class DeploymentSpec(BaseModel):
    """How the model is run on Kubernetes."""

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(
        default=1, ge=1, description="Triton pods serving this model (not with autoscaling: the HPA sets them)."
    )
    gpu_product: str = Field(
        default="NVIDIA-H100-80GB-HBM3",
        description="Value of the node label nvidia.com/gpu.product the pods are pinned to.",
    )
    namespace: str = Field(default="triton", pattern=DNS_LABEL, description="Kubernetes namespace.")
    storage: StorageSpec = Field(default_factory=StorageSpec, description="Where the model's files are.")
    http_port: int = Field(default=8000, ge=1, le=65535, description="Triton HTTP port.")
    grpc_port: int = Field(default=8001, ge=1, le=65535, description="Triton gRPC port.")
    metrics_port: int = Field(default=8002, ge=1, le=65535, description="Triton metrics port.")
    shm_size: str = Field(default="16Gi", pattern=r"^[0-9]+(Mi|Gi)$", description="Shared memory for NCCL/MPI.")
    autoscaling: AutoscalingSpec | None = Field(
        default=None,
        description="Scale the pods with Triton's queue (KEDA; needs monitoring.enabled). Unset: replicas pods.",
    )

    @model_validator(mode="after")
    def _replicas_or_autoscaling(self) -> DeploymentSpec:
        if self.autoscaling is not None and "replicas" in self.model_fields_set:
            raise ValueError(
                f"replicas {self.replicas} would not be used with autoscaling: the HPA KEDA makes sets the count "
                "(fix: drop replicas and set autoscaling.min_replicas)"
            )
        return self


class ModelSpec(BaseModel):
    """One LLM served by Triton with TensorRT-LLM."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=DNS_LABEL, description="Model name: lowercase letters, digits, '-' (a DNS label).")
    trtllm_version: str = Field(
        ...,
        description="TensorRT-LLM release (after July 2026: the Triton container release carrying it); "
        f"one of {', '.join(SUPPORTED_VERSIONS)}.",
    )
    layout: Layout = Field(
        default="llmapi",
        description="llmapi (LLM API, no engine build) or inflight_batcher_llm (prebuilt engine, 5 models; only "
        "TensorRT-LLM releases that ship the engine backend, 1.2.1 and older). Unset: llmapi, except "
        "inflight_batcher_llm for a model with engine_dir on a release with the engine backend, and on releases "
        "before 1.0 (docs/serving.md).",
    )
    hf_model_dir: str = Field(
        ..., pattern=POD_PATH, description="Absolute path (in the pod) of the HF model / tokenizer directory."
    )
    tokenizer_dir: str | None = Field(
        default=None,
        pattern=POD_PATH,
        description="Absolute tokenizer directory in the pod; defaults to hf_model_dir.",
    )
    engine_dir: str | None = Field(
        default=None,
        pattern=POD_PATH,
        description="Absolute path (in the pod) of the TRT-LLM engine directory (inflight_batcher_llm).",
    )
    source_dir: str | None = Field(
        default=None,
        pattern=POD_PATH,
        description="The model directory (config.json, weights, tokenizer) on the head node or build host "
        "that `rackctl triton deliver` copies to hf_model_dir on each GPU node (storage.kind node).",
    )
    precision: Precision = Field(default="FP16", description="Weight/compute precision the engine was built with.")
    tensor_parallelism: int = Field(default=1, ge=1, le=8, description="Tensor-parallel GPUs (within one node).")
    pipeline_parallelism: int = Field(default=1, ge=1, le=8, description="Pipeline-parallel stages.")
    max_batch_size: int = Field(default=64, ge=1, le=4096, description="Triton and engine maximum batch size.")
    max_input_len: int = Field(default=2048, ge=1, description="Longest prompt in tokens.")
    max_output_len: int = Field(default=512, ge=1, description="Most tokens generated per request.")
    kv_cache: KvCacheSpec = Field(default_factory=KvCacheSpec, description="Paged KV-cache settings.")
    batching_strategy: BatchingStrategy = Field(
        default="inflight_fused_batching", description="TRT-LLM batching (gpt_model_type)."
    )
    streaming: bool = Field(default=False, description="Stream tokens (generate_stream); makes the models decoupled.")
    max_beam_width: int = Field(default=1, ge=1, le=8, description="Beam width the engine supports.")
    max_queue_delay_microseconds: int = Field(default=600, ge=0, description="Dynamic batcher queue delay.")
    exclude_input_in_output: bool = Field(default=True, description="Return only generated tokens.")
    preprocessing_instances: int = Field(default=1, ge=1, le=64, description="Tokenizer model instances.")
    postprocessing_instances: int = Field(default=1, ge=1, le=64, description="Detokenizer model instances.")
    bls_instances: int = Field(default=1, ge=1, le=64, description="tensorrt_llm_bls instances.")
    deployment: DeploymentSpec = Field(default_factory=DeploymentSpec, description="Kubernetes placement.")

    _plain_paths = field_validator("hf_model_dir", "tokenizer_dir", "engine_dir", "source_dir")(no_parent_segments)

    @property
    def world_size(self) -> int:
        """GPUs (MPI ranks) one instance needs: TP x PP."""
        return self.tensor_parallelism * self.pipeline_parallelism

    @property
    def node_dest(self) -> str:
        """Where ``hf_model_dir`` is on each GPU node (storage.kind node): ``<node_dir>/<hf_model_dir below
        mount_path>``, the directory ``rackctl triton deliver`` fills."""
        storage = self.deployment.storage
        below = self.hf_model_dir.rstrip("/").removeprefix(storage.mount_path.rstrip("/") + "/")
        return f"{storage.node_dir.rstrip('/')}/{below}"

    @property
    def tokenizer_path(self) -> str:
        """Tokenizer directory, falling back to the HF model directory."""
        return self.tokenizer_dir or self.hf_model_dir

    @model_validator(mode="before")
    @classmethod
    def _default_layout(cls, data: Any) -> Any:
        """Fill ``layout`` when omitted: see :func:`default_layout`."""
        if isinstance(data, dict) and data.get("layout") is None and isinstance(data.get("trtllm_version"), str):
            return {**data, "layout": default_layout(data["trtllm_version"], bool(data.get("engine_dir")))}
        return data

    @field_validator("layout")
    @classmethod
    def _layout_in_release(cls, layout: Layout, info: ValidationInfo) -> Layout:
        """Refuse the engine layout for a release without the engine backend (the message names the fix)."""
        version = info.data.get("trtllm_version")
        if layout == "inflight_batcher_llm" and version in SUPPORTED_VERSIONS and version not in ENGINE_VERSIONS:
            raise ValueError(
                f"layout 'inflight_batcher_llm' is not in TensorRT-LLM {version}: its TensorRT-engine Triton "
                "backend was removed in July 2026; set layout: llmapi and drop engine_dir, or keep prebuilt "
                f"engines on trtllm_version {ENGINE_VERSIONS[-1]} or older"
            )
        return layout

    @field_validator("engine_dir")
    @classmethod
    def _engine_only_for_engine_layout(cls, engine_dir: str | None, info: ValidationInfo) -> str | None:
        """Refuse an ``engine_dir`` the layout would not read: ``llmapi`` loads ``hf_model_dir``, so keeping
        the field would silently serve the checkpoint instead of the engine it names."""
        version, layout = info.data.get("trtllm_version"), info.data.get("layout")
        if engine_dir is None or layout != "llmapi" or version not in SUPPORTED_VERSIONS:
            return engine_dir
        if not version_info(version).has_llmapi:
            return engine_dir  # the layout itself is refused by the cross-field rules
        if version_info(version).engine_backend:
            raise ValueError(
                "engine_dir is not read by layout 'llmapi', which loads hf_model_dir; drop engine_dir to serve "
                "hf_model_dir through the LLM API, or set layout: inflight_batcher_llm to serve the engine"
            )
        raise ValueError(
            f"engine_dir is not read by TensorRT-LLM {version}: it has no engine backend, only layout 'llmapi', "
            "which loads hf_model_dir; drop engine_dir to serve hf_model_dir through the LLM API, or keep the "
            f"engine on trtllm_version {ENGINE_VERSIONS[-1]} or older with layout: inflight_batcher_llm"
        )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ModelSpec:
        if self.trtllm_version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"trtllm_version {self.trtllm_version!r} is not supported "
                f"(fix: use one of {', '.join(SUPPORTED_VERSIONS)})"
            )
        info = version_info(self.trtllm_version)
        if self.layout == "inflight_batcher_llm" and not self.engine_dir:
            raise ValueError(
                "engine_dir is required for layout 'inflight_batcher_llm' "
                "(fix: set engine_dir to the built engine directory, or use layout: llmapi)"
            )
        if self.layout == "llmapi" and not info.has_llmapi:
            raise ValueError(
                f"layout 'llmapi' needs TensorRT-LLM >= 1.0, got trtllm_version {self.trtllm_version!r} "
                "(fix: use layout: inflight_batcher_llm or a newer trtllm_version)"
            )
        if self.layout == "inflight_batcher_llm" and self.batching_strategy not in info.batching_strategies:
            raise ValueError(
                f"batching_strategy {self.batching_strategy!r} is not available in TensorRT-LLM "
                f"{self.trtllm_version} (fix: use one of {', '.join(info.batching_strategies)})"
            )
        storage = self.deployment.storage
        for field in ("hf_model_dir", "tokenizer_dir", "engine_dir"):
            value = getattr(self, field)
            if value is not None and not _under(value, storage.mount_path):
                raise ValueError(
                    f"{field} {value} is outside deployment.storage.mount_path {storage.mount_path}, where the "
                    f"pod sees the model's files; put it under {storage.mount_path}/ or change mount_path"
                )
        if self.source_dir and self.layout == "inflight_batcher_llm":
            raise ValueError(
                "source_dir is delivered to hf_model_dir for layout llmapi only: an engine and its tokenizer "
                "are two directories; place them on the nodes yourself (drop source_dir), or use layout: llmapi"
            )
        if self.source_dir and storage.kind == "nfs":
            raise ValueError(
                "source_dir is for storage.kind node: rackctl never writes to an NFS export; "
                "drop source_dir and place the files on the export, or use kind: node"
            )
        if self.kv_cache.max_attention_window > self.kv_cache.max_tokens:
            raise ValueError(
                f"kv_cache.max_attention_window {self.kv_cache.max_attention_window} exceeds "
                f"kv_cache.max_tokens {self.kv_cache.max_tokens} (fix: lower it or raise max_tokens)"
            )
        if self.tensor_parallelism * self.pipeline_parallelism > 8:
            raise ValueError(
                f"tensor_parallelism x pipeline_parallelism = {self.world_size} exceeds the 8 GPUs "
                "of one node "
                "(fix: lower tensor_parallelism or pipeline_parallelism)"
            )
        return self


def default_layout(trtllm_version: str, has_engine_dir: bool) -> Layout:
    """The layout of a model that names none: ``llmapi`` wherever the release has it, except that a model
    with an ``engine_dir`` on a release that still ships the engine backend keeps ``inflight_batcher_llm``
    (what an inventory written before the default changed meant); releases before 1.0 only have engines."""
    if trtllm_version not in SUPPORTED_VERSIONS:
        return "llmapi"  # the version itself is refused by the cross-field rules
    info = version_info(trtllm_version)
    if not info.has_llmapi or (has_engine_dir and info.engine_backend):
        return "inflight_batcher_llm"
    return "llmapi"


def _under(path: str, root: str) -> bool:
    return path.rstrip("/").startswith(root.rstrip("/") + "/")
