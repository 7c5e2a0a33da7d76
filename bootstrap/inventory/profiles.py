"""Software version profiles and the facts that tie versions to each other.

A profile is a named, consistent set of versions. ``current`` is the default; ``dell-dvd-2024`` is the
stack the Dell validated design for generative-AI inferencing was validated with, corrected where the
published combination cannot work (each correction is reported as a warning).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Versions(BaseModel):
    """Versions of everything rackctl installs."""

    model_config = ConfigDict(extra="forbid")

    os: str = Field(description="Operating system, e.g. 'ubuntu-24.04'.")
    kubernetes: str = Field(description="Kubernetes version (x.y.z).")
    kubeadm_api: str | None = Field(
        default=None, description="kubeadm config API version; derived from the Kubernetes version when unset."
    )
    containerd: str
    gpu_operator: str = Field(description="NVIDIA GPU operator chart version, e.g. v25.10.0.")
    nvidia_driver: str | None = Field(
        default=None, description="Pinned NVIDIA driver; unset means the GPU operator chart's default."
    )
    triton: str = Field(description="Triton container release, e.g. 25.12 (tag YY.MM-trtllm-python-py3).")
    trtllm: str = Field(description="TensorRT-LLM version of the engines.")
    kube_vip: str = "v0.8.9"


class Profile(BaseModel):
    """A named version set, with the notes (corrections) that come with it."""

    model_config = ConfigDict(extra="forbid")

    description: str
    versions: Versions
    notes: list[str] = Field(default_factory=list)


PROFILES: dict[str, Profile] = {
    "current": Profile(
        description="Current stack (default)",
        versions=Versions(
            os="ubuntu-24.04",
            kubernetes="1.33.5",
            containerd="2.1.4",
            gpu_operator="v25.10.0",
            nvidia_driver="580.95.05",
            triton="25.12",
            trtllm="1.1.0",
        ),
    ),
    "dell-dvd-2024": Profile(
        description="Dell validated design for generative-AI inferencing (design guide rev. 3, March 2024)",
        versions=Versions(
            os="ubuntu-22.04",
            kubernetes="1.27.6",
            containerd="1.7.13",
            gpu_operator="v22.9.2",
            nvidia_driver="535.161.08",
            triton="24.02",
            trtllm="0.8.0",
            kube_vip="v0.6.4",
        ),
        notes=[
            "the design guide's GPU operator v22.9.2 defaults to driver 525.60.13, below the 525.85 minimum "
            "of CUDA 12 containers: this profile pins driver 535.161.08",
            "GPU operator chart v22.9.x defaults operator.defaultRuntime to docker: rackctl sets containerd",
            "Triton 23.04 has no TensorRT-LLM backend: this profile uses 24.02-trtllm-python-py3, the release "
            "matching TensorRT-LLM 0.8",
        ],
    ),
}

#: Default driver of GPU operator chart lines (used when no driver is pinned).
OPERATOR_DEFAULT_DRIVER: dict[str, str] = {
    "v22.9": "525.60.13",
    "v23.9": "535.104.12",
    "v24.3": "550.54.15",
    "v24.9": "550.127.05",
    "v25.3": "570.124.06",
    "v25.10": "580.95.05",
}

#: Chart lines whose ``operator.defaultRuntime`` default is docker (rackctl must set containerd).
OPERATOR_DOCKER_DEFAULT = ("v22.9",)

#: Triton release -> (CUDA major.minor, minimum driver of its containers on data-center GPUs).
TRITON_CUDA: dict[str, tuple[str, str]] = {
    "23.04": ("12.1", "525.85"),
    "23.10": ("12.2", "525.85"),
    "24.02": ("12.3", "525.85"),
    "24.10": ("12.6", "525.85"),
    "25.12": ("13.0", "580.95"),
}

#: First Triton release with a TensorRT-LLM backend container.
TRITON_FIRST_TRTLLM = "23.10"

#: TensorRT-LLM release (major.minor) -> matching Triton release.
TRTLLM_TRITON: dict[str, str] = {"0.8": "24.02", "0.14": "24.10", "1.1": "25.12"}


def version_tuple(version: str) -> tuple[int, ...]:
    """'v1.27.6' -> (1, 27, 6); non-numeric parts are ignored."""
    parts = []
    for piece in version.lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def kubeadm_api_for(kubernetes: str) -> str:
    """kubeadm config API for a Kubernetes version: v1beta3 for 1.22-1.30, v1beta4 from 1.31."""
    return "kubeadm.k8s.io/v1beta4" if version_tuple(kubernetes)[:2] >= (1, 31) else "kubeadm.k8s.io/v1beta3"


def operator_line(chart: str) -> str:
    """'v22.9.2' -> 'v22.9'."""
    major_minor = version_tuple(chart)[:2]
    return "v" + ".".join(str(p) for p in major_minor)
