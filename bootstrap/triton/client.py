"""Triton's Python client, an extra (``rackctl[triton]``): loaded only by what needs it, named when missing.

``tritonclient`` (with grpc, protobuf and numpy) is most of a full install's weight, and only Triton's
config parse (``triton check``, the triton stage), the load check and ``triton smoke``'s direct client use
it. Everything else runs on the base install; these say which extra to install, exit 3, no traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from bootstrap.errors import EnvironmentMissing

EXTRA = "pip install 'rackctl[triton]'"


def _load(module: str, purpose: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EnvironmentMissing(
            f"{purpose} needs Triton's client ({exc.name or module} is not installed): {EXTRA}"
        ) from None


def model_config() -> tuple[ModuleType, ModuleType]:
    """``(text_format, model_config_pb2)``: protobuf's text parser and Triton's ModelConfig messages."""
    purpose = "parsing config.pbtxt with Triton's ModelConfig"
    return _load("google.protobuf.text_format", purpose), _load("tritonclient.grpc.model_config_pb2", purpose)


def http_client() -> ModuleType:
    """``tritonclient.http``."""
    return _load("tritonclient.http", "talking to tritonserver")
