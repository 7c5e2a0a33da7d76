"""LAB STAND-IN for TensorRT-LLM's LLM API (``tensorrt_llm.LLM``, ``SamplingParams``), for the lab's Triton image.

A test double by necessity: the LLM API needs an NVIDIA GPU, and this lab has none. The lab's Triton image
(:mod:`rackctl_lab.components.triton_image`) installs this file as the ``tensorrt_llm`` package, so rackctl's
own LLM-API model (``bootstrap/triton/templates/llmapi/tensorrt_llm/model.py``) runs unchanged in the real
tritonserver: its ``model.yaml`` read, ``LLM(**llm_args)`` called, ``generate``/``generate_async`` answered.
What it checks is what the real LLM API would need first: the model directory holds the checkpoint's
``config.json`` and the tokenizer directory a tokenizer, both read through the pod's volume (the delivered
weights). It says what it loaded on stderr (the pod's log). It answers the prompt's own words, ``max_tokens``
at most (an echo), one chunk per word when streaming: the same behaviour as ``rackctl triton load-check``'s
stand-in model. Each word takes :data:`DECODE_STEP_S`, a decode step's order of time on a GPU, so requests
sent at once queue in Triton's scheduler as they would there (what an autoscaler on the queue reads).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: What the lab's image says it is (``tensorrt_llm.__version__``)
__version__ = "lab-stand-in"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
#: seconds per generated word
DECODE_STEP_S = 0.05


@dataclass
class SamplingParams:
    """The sampling arguments rackctl's model passes (only ``max_tokens`` shapes the echo)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    stop: list[str] | None = None
    bad: list[str] | None = None


@dataclass
class CompletionOutput:
    text: str
    text_diff: str = ""


@dataclass
class RequestOutput:
    prompt: str
    outputs: list[CompletionOutput] = field(default_factory=list)


class LLM:
    """Loads nothing but checks the model's files are where rackctl's configs point."""

    def __init__(self, model: str, tokenizer: str | None = None, **kwargs: Any) -> None:
        config = Path(model) / "config.json"
        if not config.is_file():
            raise FileNotFoundError(f"{model}: no config.json (the model's files are not where its config points)")
        architectures = json.loads(config.read_text()).get("architectures", [])
        tokenizer_dir = Path(tokenizer or model)
        if not any((tokenizer_dir / name).is_file() for name in TOKENIZER_FILES):
            raise FileNotFoundError(f"{tokenizer_dir}: no tokenizer ({', '.join(TOKENIZER_FILES)})")
        self.model, self.args = model, kwargs
        print(
            f"tensorrt_llm LAB STAND-IN: loaded {config} ({', '.join(architectures) or 'no architectures'}), "
            f"tokenizer {tokenizer_dir}, backend {kwargs.get('backend')}, "
            f"tp {kwargs.get('tensor_parallel_size')} pp {kwargs.get('pipeline_parallel_size')}",
            file=sys.stderr,
            flush=True,
        )

    @staticmethod
    def _words(prompt: str, sampling: SamplingParams) -> list[str]:
        return prompt.split()[: sampling.max_tokens]

    @staticmethod
    def _decode_step() -> None:
        time.sleep(DECODE_STEP_S)

    def generate(self, prompt: str, sampling: SamplingParams) -> RequestOutput:
        words = self._words(prompt, sampling)
        for _ in words:
            self._decode_step()
        text = " ".join(words)
        return RequestOutput(prompt, [CompletionOutput(text, text)])

    def generate_async(self, prompt: str, sampling: SamplingParams, streaming: bool = False) -> Iterator[RequestOutput]:
        words = self._words(prompt, sampling)
        chunks = [f" {w}" if i else w for i, w in enumerate(words)] if streaming else [" ".join(words)]
        text = ""
        for chunk in chunks:
            for _ in range(1 if streaming else len(words)):
                self._decode_step()
            text += chunk
            yield RequestOutput(prompt, [CompletionOutput(text, chunk)])

    def shutdown(self) -> None:
        """Nothing to release."""
