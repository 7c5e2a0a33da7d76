"""TensorRT-LLM versions rackctl renders for: Triton container tag and the tensorrt_llm parameter set.

Sources: Triton's "Release Compatibility Matrix" (``docs/introduction/compatibility.md``, container
``trtllm-python-py3``, read at branch r26.08 of triton-inference-server/server, 2026-11-30): each release
is keyed to the **first** monthly container that carries it (1.0.0: 25.09, also 25.10; 1.1.0: 25.12, also
26.01 and 26.02; 1.2.0: 26.03; 1.2.1: 26.04, also 26.05 to 26.07); 0.8 <-> 24.02 from 24.02's release notes.
The parameters are those of ``tensorrt_llm/config.pbtxt`` in each tensorrtllm_backend / TensorRT-LLM
release up to 1.1.0; 1.0.0, 1.2.0 and 1.2.1 take 1.1.0's set (their files at the release tags were not
read: docs/serving.md).

TensorRT-LLM removed the TensorRT-engine Triton backend (rackctl's ``inflight_batcher_llm`` layout) and the
``trtllm-build`` examples in July 2026 (NVIDIA/TensorRT-LLM#15907, #15763); Triton keeps shipping monthly
(2.71.0 = 26.07). Releases after the removal are keyed by their Triton container (``26.07``): the container
tag is what rackctl's sources name (docs/serving.md says what Triton's matrix says 26.07 holds).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Parameters every supported release of the tensorrtllm backend reads (leader mode; orchestrator-mode
#: ``gpu_device_ids`` and encoder-decoder ``cross_kv_cache_fraction`` are not rendered).
_BASE_PARAMETERS: tuple[str, ...] = (
    "max_beam_width",
    "gpt_model_type",
    "gpt_model_path",
    "max_tokens_in_paged_kv_cache",
    "max_attention_window_size",
    "batch_scheduler_policy",
    "kv_cache_free_gpu_mem_fraction",
    "exclude_input_in_output",
    "enable_kv_cache_reuse",
    "normalize_log_probs",
    "enable_chunked_context",
    "decoding_mode",
)
_ADDED_0_9: tuple[str, ...] = (
    "executor_worker_path",
    "lora_cache_optimal_adapter_size",
    "lora_cache_max_adapter_size",
    "lora_cache_gpu_memory_fraction",
    "lora_cache_host_memory_bytes",
)
_ADDED_0_10: tuple[str, ...] = (
    "gpu_weights_percent",
    "cancellation_check_period_ms",
    "stats_check_period_ms",
)
_ADDED_0_11: tuple[str, ...] = (
    "iter_stats_max_iterations",
    "request_stats_max_iterations",
    "kv_cache_host_memory_bytes",
    "kv_cache_onboard_blocks",
)
_ADDED_0_14: tuple[str, ...] = ("multi_block_mode", "enable_context_fmha_fp32_acc")
_REMOVED_0_9: tuple[str, ...] = ("enable_trt_overlap",)


@dataclass(frozen=True)
class VersionInfo:
    """What one TensorRT-LLM release needs from a model repository."""

    trtllm: str
    triton_tag: str
    parameters: tuple[str, ...]
    batching_strategies: tuple[str, ...]
    has_llmapi: bool = False
    #: Whether the release still ships the TensorRT-engine backend (the ``inflight_batcher_llm`` layout).
    engine_backend: bool = True
    #: Later monthly containers that carry the same release (Triton's compatibility matrix); ``image`` is
    #: always ``triton_tag``'s, these only let ``cluster.versions.triton`` name one of them.
    also_in: tuple[str, ...] = ()

    @property
    def containers(self) -> tuple[str, ...]:
        """Every Triton release whose ``trtllm-python-py3`` container carries this release, first first."""
        return (self.triton_tag, *self.also_in)

    @property
    def image(self) -> str:
        """The NGC Triton image holding this TensorRT-LLM release."""
        return f"nvcr.io/nvidia/tritonserver:{self.triton_tag}-trtllm-python-py3"


def _params(*groups: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for group in groups:
        out.extend(p for p in group if p not in out)
    return tuple(out)


_V08 = _params(_BASE_PARAMETERS, _REMOVED_0_9)
_V09 = _params(_BASE_PARAMETERS, _ADDED_0_9)
_V10 = _params(_V09, _ADDED_0_10)
_V11 = _params(_V10, _ADDED_0_11)
_V14 = _params(_V11, _ADDED_0_14)
_ALL_STRATEGIES = ("inflight_fused_batching", "inflight_batching", "V1")
_IFB_ONLY = ("inflight_fused_batching",)

_VERSIONS: dict[str, VersionInfo] = {
    v.trtllm: v
    for v in (
        VersionInfo("0.8.0", "24.02", _V08, _ALL_STRATEGIES),
        VersionInfo("0.9.0", "24.04", _V09, _ALL_STRATEGIES, also_in=("24.05",)),
        VersionInfo("0.10.0", "24.06", _V10, _ALL_STRATEGIES),
        VersionInfo("0.11.0", "24.07", _V11, (*_IFB_ONLY, "V1")),
        VersionInfo("0.12.0", "24.08", _V11, (*_IFB_ONLY, "V1")),
        VersionInfo("0.13.0", "24.09", _V11, (*_IFB_ONLY, "V1")),
        VersionInfo("0.14.0", "24.10", _V14, _IFB_ONLY),
        VersionInfo("0.15.0", "24.11", _V14, _IFB_ONLY),
        VersionInfo("0.16.0", "24.12", _V14, _IFB_ONLY),
        VersionInfo("1.0.0", "25.09", _V14, _IFB_ONLY, has_llmapi=True, also_in=("25.10",)),
        VersionInfo("1.1.0", "25.12", _V14, _IFB_ONLY, has_llmapi=True, also_in=("26.01", "26.02")),
        VersionInfo("1.2.0", "26.03", _V14, _IFB_ONLY, has_llmapi=True),
        VersionInfo("1.2.1", "26.04", _V14, _IFB_ONLY, has_llmapi=True, also_in=("26.05", "26.06", "26.07")),
        VersionInfo("26.07", "26.07", (), _IFB_ONLY, has_llmapi=True, engine_backend=False),
    )
}

SUPPORTED_VERSIONS: tuple[str, ...] = tuple(_VERSIONS)
#: Releases that ship the engine backend (the only ones ``inflight_batcher_llm`` renders for).
ENGINE_VERSIONS: tuple[str, ...] = tuple(v for v, info in _VERSIONS.items() if info.engine_backend)
#: Releases keyed by their Triton container rather than a TensorRT-LLM version (``trtllm_version`` = the tag).
CONTAINER_KEYED: tuple[str, ...] = tuple(v for v, info in _VERSIONS.items() if v == info.triton_tag)


def version_info(trtllm_version: str) -> VersionInfo:
    """Facts for one supported TensorRT-LLM version (KeyError for an unknown one)."""
    return _VERSIONS[trtllm_version]
