"""Triton's Python client, an extra (``rackctl[triton]``): loaded only by what needs it, named when missing.

``tritonclient`` (with grpc, protobuf and numpy) is most of a full install's weight, and only Triton's
config parse (``triton check``, the triton stage) and the load check (``triton load-check``, the extra
``rackctl[load-check]``, which adds the tritonserver binary and tokenizers) use it; ``triton smoke`` speaks
HTTP with the standard library. Everything else runs on the base install; these say which extra to
install, exit 3, no traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from bootstrap.errors import EnvironmentMissing, Problem

EXTRA = "pip install 'rackctl[triton]'"
LOAD_CHECK_EXTRA = "pip install 'rackctl[load-check]'"


def _load(module: str, purpose: str, extra: str = EXTRA) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise EnvironmentMissing(
            f"{purpose} needs Triton's client, which is not installed",
            problems=[Problem(module, "not importable", extra)],
        ) from None


def model_config() -> tuple[ModuleType, ModuleType]:
    """``(text_format, model_config_pb2)``: protobuf's text parser and Triton's ModelConfig messages."""
    purpose = "parsing config.pbtxt with Triton's ModelConfig"
    return _load("google.protobuf.text_format", purpose), _load("tritonclient.grpc.model_config_pb2", purpose)


def load_check_modules() -> None:
    """Refuse (exit 3, naming ``rackctl[load-check]``) unless everything the load check imports is installed."""
    purpose = "the load check"
    for module in ("tritonclient.http", "tritonclient.grpc.model_config_pb2", "google.protobuf.text_format"):
        _load(module, purpose, LOAD_CHECK_EXTRA)
    for module, what in (("tokenizers", "its offline tokenizer"), ("pytriton", "the tritonserver binary")):
        if importlib.util.find_spec(module) is None:
            raise EnvironmentMissing(
                f"{purpose} needs {what}, which is not installed",
                problems=[Problem(module, "not importable", LOAD_CHECK_EXTRA)],
            )
