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
    """Where the rendered model repository (and the engines) live for the pods."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local-path", "nfs"] = Field(
        default="local-path",
        description="local-path: a PVC on the local-path StorageClass; nfs: an NFS/PowerScale share.",
    )
    size: str = Field(default="200Gi", pattern=r"^[0-9]+(Mi|Gi|Ti)$", description="Volume size, e.g. 200Gi.")
    storage_class: str = Field(default="local-path", description="StorageClass of the PVC when kind is local-path.")
    nfs_server: str | None = Field(default=None, description="NFS/PowerScale server name or address (kind nfs).")
    nfs_path: str | None = Field(default=None, description="Exported path on the NFS server (kind nfs).")
    mount_path: str = Field(default="/models", pattern=r"^/", description="Where the volume is mounted in the pod.")

    @model_validator(mode="after")
    def _nfs_needs_server(self) -> StorageSpec:
        if self.kind == "nfs" and not (self.nfs_server and self.nfs_path):
            raise ValueError(
                "storage.nfs_server and storage.nfs_path are required when storage.kind is 'nfs' "
                "(fix: set both, or use kind: local-path)"
            )
        return self


class DeploymentSpec(BaseModel):
    """How the model is run on Kubernetes."""

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(default=1, ge=1, description="Triton pods serving this model.")
    gpu_product: str = Field(
        default="NVIDIA-H100-80GB-HBM3",
        description="Value of the node label nvidia.com/gpu.product the pods are pinned to.",
    )
    namespace: str = Field(default="triton", pattern=DNS_LABEL, description="Kubernetes namespace.")
    storage: StorageSpec = Field(default_factory=StorageSpec, description="Volume holding the repository.")
    http_port: int = Field(default=8000, ge=1, le=65535, description="Triton HTTP port.")
    grpc_port: int = Field(default=8001, ge=1, le=65535, description="Triton gRPC port.")
    metrics_port: int = Field(default=8002, ge=1, le=65535, description="Triton metrics port.")
    shm_size: str = Field(default="16Gi", pattern=r"^[0-9]+(Mi|Gi)$", description="Shared memory for NCCL/MPI.")


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
        description="llmapi (LLM API, no engine build; the default) or inflight_batcher_llm (prebuilt engine, "
        "5 models; only TensorRT-LLM releases that ship the engine backend).",
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

    @property
    def world_size(self) -> int:
        """GPUs (MPI ranks) one instance needs: TP x PP."""
        return self.tensor_parallelism * self.pipeline_parallelism

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
