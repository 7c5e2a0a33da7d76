"""``rackctl up``'s options for the validation at the end of the nvidia stage
(:mod:`bootstrap.stages.nvidia.validate`)."""

from __future__ import annotations

from typing import Any

import click

from bootstrap.cli import flags
from bootstrap.stages.options import VALIDATE_TIMEOUT_S, ValidateOptions


def validate_options(func: Any) -> Any:
    """``--skip-validate``, ``--validate-timeout SECONDS`` and ``--validate-nccl``."""
    func = click.option(
        "--validate-nccl",
        is_flag=True,
        help="Where the nvidia stage validates the cluster: also run nccl-tests' all_reduce_perf on every node "
        "with SXM GPUs.",
    )(func)
    func = flags.seconds(
        "--validate-timeout",
        "validate_timeout",
        minimum=1,
        default=None,
        metavar="SECONDS",
        help_text="Where a cluster exists: how long the nvidia stage polls the read-only checks until they pass "
        f"(GPUs advertised, nodes Ready), then how long the CUDA smoke Jobs may take (default {VALIDATE_TIMEOUT_S:g} "
        "each).",
    )(func)
    return click.option(
        "--skip-validate",
        is_flag=True,
        help="Do not validate the cluster at the end of the nvidia stage (it says 'validators not run').",
    )(func)


def validate_given(*, skip_validate: bool, validate_timeout: float | None, validate_nccl: bool) -> ValidateOptions:
    """The options as the stage reads them (``RunOptions.validate``)."""
    return ValidateOptions(skip=skip_validate, timeout_s=validate_timeout or VALIDATE_TIMEOUT_S, nccl=validate_nccl)
