"""The typed options of one run, per concern: the CLI fills them, the stages read them (``RunOptions``).

One dataclass per stage (or pair of stages) that takes options beyond the common ones (``--dry-run``,
``--force``, ``--yes``, ``--insecure``). Each has defaults that mean "not asked", so a stage reads its
options without checking whether the CLI gave them, and a test builds exactly the options it means. What
the CLI gave is said again on the run's command line in the journal (``flags()`` where there are some).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Helm's install and readiness watch per release (``up --helm-timeout``).
HELM_TIMEOUT_S = 600.0
#: Triton's rollout watch per Deployment (``up --triton-timeout``).
TRITON_TIMEOUT_S = 600.0
#: The end-of-stage cluster validation (``up --validate-timeout``).
VALIDATE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class HelmOptions:
    """Stages installing Helm releases (kubernetes, nvidia)."""

    timeout_s: float = HELM_TIMEOUT_S


@dataclass(frozen=True)
class TritonOptions:
    """The triton stage: the rollout watch, and the load check after the smoke."""

    rollout_timeout_s: float = TRITON_TIMEOUT_S
    load_check: bool = False


@dataclass(frozen=True)
class FirmwareOptions:
    """The firmware stage: a read-only baseline check unless ``apply`` (``up --apply-firmware``)."""

    apply: bool = False
    #: seconds between reads of a BMC's job while a rollout waits on it
    poll_s: float = 5.0


@dataclass(frozen=True)
class BiosOptions:
    """The bios stage: stage the profile for the next boot, or reboot into it (``bios apply --reboot``)."""

    reboot: bool = False


@dataclass(frozen=True)
class ProvisionOptions:
    """The provision stage's overrides (``rackctl provision``); ``None``: the default of each."""

    kernel: Path | None = None
    initrd: Path | None = None
    image: Path | None = None
    ssh_key: Path | None = None
    ssh_user: str | None = None
    callback_timeout_s: float | None = None
    ssh_timeout_s: float | None = None
    power_off_timeout_s: float | None = None
    max_parallel: int | None = None


@dataclass(frozen=True)
class ValidateOptions:
    """The nvidia stage's end validation (``up --skip-validate``, ``--validate-timeout``, ``--validate-nccl``)."""

    skip: bool = False
    timeout_s: float = VALIDATE_TIMEOUT_S
    nccl: bool = False

    def flags(self) -> str:
        """The ``up`` flags that gave these options (for the run's command line in the journal)."""
        text = " --skip-validate" if self.skip else ""
        text += f" --validate-timeout {self.timeout_s:g}" if self.timeout_s != VALIDATE_TIMEOUT_S else ""
        return text + (" --validate-nccl" if self.nccl else "")
