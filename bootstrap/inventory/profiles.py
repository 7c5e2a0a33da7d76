"""Software version profiles and the facts that tie versions to each other.

A profile is a named, consistent set of versions. ``current`` is the default; ``dell-dvd-2024`` is the
stack the Dell validated design for generative-AI inferencing was validated with, corrected where the
published combination cannot work (each correction is reported as a warning).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    gpu_operator: str = Field(description="NVIDIA GPU operator chart version, e.g. v26.7.0.")
    nvidia_driver: str | None = Field(
        default=None, description="Pinned NVIDIA driver; unset means the GPU operator chart's default."
    )
    triton: str = Field(description="Triton container release, e.g. 25.12 (tag YY.MM-trtllm-python-py3).")
    trtllm: str = Field(
        description="TensorRT-LLM version the models run (after July 2026 the Triton container carrying it, "
        "e.g. 26.07, as in models[].trtllm_version)."
    )
    kube_vip: str = "v1.2.3"


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
            kubernetes="1.37.2",
            containerd="2.1.4",
            gpu_operator="v26.7.0",
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

#: Default driver (``driver.version`` in the chart's ``values.yaml``) of each GPU Operator chart release, used
#: when no driver is pinned. Source: the chart itself, ``deployments/gpu-operator/values.yaml`` at the
#: release tag of https://github.com/NVIDIA/gpu-operator (e.g.
#: https://github.com/NVIDIA/gpu-operator/blob/v25.10.0/deployments/gpu-operator/values.yaml). The default
#: changes between patch releases of one line, so this is keyed by the full chart version; a release not
#: listed has no known default (:func:`operator_default_driver` returns None).
OPERATOR_DEFAULT_DRIVER: dict[str, str] = {
    "v22.9.0": "515.65.01",
    "v22.9.1": "525.60.13",
    "v22.9.2": "525.60.13",
    "v23.9.0": "535.104.12",
    "v23.9.1": "535.129.03",
    "v23.9.2": "550.54.14",
    "v24.3.0": "550.54.15",
    "v24.6.0": "550.90.07",
    "v24.6.1": "550.90.07",
    "v24.6.2": "550.90.07",
    "v24.9.0": "550.127.05",
    "v24.9.1": "550.127.08",
    "v24.9.2": "550.144.03",
    "v25.3.0": "570.124.06",
    "v25.3.1": "570.148.08",
    "v25.3.2": "570.148.08",
    "v25.3.3": "580.82.07",
    "v25.3.4": "580.82.07",
    "v25.10.0": "580.95.05",
    "v25.10.1": "580.105.08",
    # not read from values.yaml: the component matrix in NVIDIA's release docs (NVIDIA/cloud-native-docs#353,
    # "580.126.20 (D, R)" for 26.3.0; #456, "NVIDIA GPU Driver 595.91.07" among 26.7.0's component versions)
    "v26.3.0": "580.126.20",
    "v26.7.0": "595.91.07",
}

#: Chart lines whose ``operator.defaultRuntime`` default is docker (rackctl must set containerd).
OPERATOR_DOCKER_DEFAULT = ("v22.9",)

#: The first chart release without ``operator.defaultRuntime``: from v25.3.0 the operator reads each node's
#: runtime from the node's info (NVIDIA/gpu-operator#1211, merged 2025-01: "no longer used ... We glean the
#: runtime from K8s Node Info instead"; the chart template's conditional block went with it).
OPERATOR_RUNTIME_DETECTED = (25, 3)


def operator_sets_runtime(chart: str) -> bool:
    """Whether chart release ``chart`` still takes ``operator.defaultRuntime`` (older than v25.3.0)."""
    return version_tuple(chart)[:2] < OPERATOR_RUNTIME_DETECTED


#: Triton release -> (CUDA version of its container, the driver release that CUDA needs: a branch such as
#: "545" means "release 545 or later"; None where the release notes name none). Data-center GPUs may also run
#: the older branches of :data:`TRITON_DATACENTER_DRIVERS` (CUDA forward compatibility);
#: :func:`triton_driver_verdict` applies both.
#: Sources, "Driver Requirements" of each release's notes (NVIDIA Triton Inference Server Release Notes):
#: 23.04 https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-23-04.html,
#: 23.10 https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-23-10.html,
#: 24.02 https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-24-02.html,
#: 24.10 https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-24-10.html.
#: 25.12 is the ``25.12-trtllm-python-py3`` container of TensorRT-LLM 1.1.0: CUDA 13.0 and driver 580.95 or
#: later per the project's stack facts and Triton's "Release Compatibility Matrix" (trtllm-python-py3 row
#: 25.12: TensorRT-LLM 1.1.0, CUDA 13.0.2.006, CUDA driver 580.95.05; the base container's notes,
#: https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-25-12.html, say CUDA
#: 13.1.0 and "575 or later", which is below the 580 every CUDA 13.x needs per "CUDA Compatibility").
#: 26.07 (Triton 2.71.0, the first release after TensorRT-LLM removed its engine backend): its notes,
#: https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-26-07.html, say "based on
#: CUDA 13.3.1 which requires the NVIDIA Driver release" and name no driver; only CUDA 13.x's minor-version
#: compatibility floor (580) is known, so :func:`triton_driver_verdict` refuses below it and warns above it.
#: 25.09 to 26.06 (but 25.11) are ``trtllm-python-py3`` containers of TensorRT-LLM 1.0.0 to 1.2.1: CUDA and
#: "CUDA Driver version" of their rows in Triton's "Release Compatibility Matrix"
#: (``docs/introduction/compatibility.md`` at branch r26.08 of triton-inference-server/server): 25.09 and
#: 25.10 CUDA 12.9.1.010 with 575.57.08, 26.01 and 26.02 CUDA 13.0.2.006 with 580.95.05, 26.03 to 26.06 CUDA
#: 13.1.0.036 with 590.44.01. Their release notes' data-center driver lists were not read
#: (:data:`TRITON_DATACENTER_DRIVERS` has none for them). 26.07 keeps its release notes' CUDA 13.3.1,
#: although the matrix gives its trtllm container CUDA 13.1.0.036 and 590.44.01 (docs/serving.md).
TRITON_CUDA: dict[str, tuple[str, str | None]] = {
    "23.04": ("12.1.0", "530"),
    "23.10": ("12.2.2", "535"),
    "24.02": ("12.3.2", "545"),
    "24.10": ("12.6.2", "560"),
    "25.09": ("12.9.1.010", "575.57.08"),
    "25.10": ("12.9.1.010", "575.57.08"),
    "25.12": ("13.0", "580.95"),
    "26.01": ("13.0.2.006", "580.95.05"),
    "26.02": ("13.0.2.006", "580.95.05"),
    "26.03": ("13.1.0.036", "590.44.01"),
    "26.04": ("13.1.0.036", "590.44.01"),
    "26.05": ("13.1.0.036", "590.44.01"),
    "26.06": ("13.1.0.036", "590.44.01"),
    "26.07": ("13.3.1", None),
}

#: Triton release -> {older driver branch: its least version} that the release notes allow "if you are
#: running on a data center GPU" (the CUDA forward-compatibility package in the container); same pages as
#: :data:`TRITON_CUDA`. 25.12 has none: its notes repeat the CUDA 12 list, which the CUDA Compatibility
#: guide contradicts for CUDA 13, and stack-facts.md sets 580.95 as the floor. 26.07's notes name none;
#: those of 25.09 to 26.06 were not read.
TRITON_DATACENTER_DRIVERS: dict[str, dict[str, str]] = {
    "23.04": {"450": "450.51", "470": "470.57", "510": "510.47", "515": "515.65", "525": "525.85", "530": "530.30"},
    "23.10": {"450": "450.51", "470": "470.57", "510": "510.47", "525": "525.85", "535": "535.86"},
    "24.02": {"470": "470.57", "525": "525.85", "535": "535.86", "545": "545.23"},
    "24.10": {"470": "470.57", "525": "525.85", "535": "535.86", "545": "545.23"},
    "25.09": {},
    "25.10": {},
    "25.12": {},
    "26.01": {},
    "26.02": {},
    "26.03": {},
    "26.04": {},
    "26.05": {},
    "26.06": {},
    "26.07": {},
}

#: CUDA major version -> the least driver of its minor-version compatibility ("CUDA Compatibility",
#: Minor Version Compatibility, Table 1: CUDA 12.x >= 525, CUDA 13.x >= 580;
#: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html). Below it a
#: container of that CUDA major cannot start without a forward-compatibility branch.
CUDA_MINOR_COMPAT_DRIVER: dict[str, str] = {"11": "450", "12": "525", "13": "580"}


@dataclass(frozen=True)
class DriverVerdict:
    """How a driver fares against a Triton release: accepted, refused (``accepted`` False) or not covered by
    the release notes (``accepted`` None: works only through CUDA minor-version compatibility)."""

    accepted: bool | None
    reason: str
    fix: str = ""


def _branch(version: str) -> str:
    return version.split(".", 1)[0]


def triton_driver_options(triton: str) -> str:
    """The drivers a Triton release's notes allow, in words (for messages)."""
    cuda, native = TRITON_CUDA[triton]
    if native is None:
        floor = CUDA_MINOR_COMPAT_DRIVER.get(_branch(cuda), "?")
        return f"{floor} or later (CUDA {_branch(cuda)}.x minor-version compatibility: its notes name no driver)"
    older = ", ".join(f"R{b} >= {v}" for b, v in TRITON_DATACENTER_DRIVERS.get(triton, {}).items())
    return f"{native} or later" + (f"; on data-center GPUs also {older}" if older else "")


def triton_driver_verdict(triton: str, driver: str) -> DriverVerdict | None:
    """Check ``driver`` against Triton ``triton``'s driver requirements; None when the release is not known."""
    if triton not in TRITON_CUDA:
        return None
    cuda, native = TRITON_CUDA[triton]
    what = f"Triton {triton} (CUDA {cuda})"
    options = triton_driver_options(triton)
    have = version_tuple(driver)
    if native is None:
        return _verdict_without_notes(what, cuda, driver, options)
    if have >= version_tuple(native):
        return DriverVerdict(True, f"{driver} >= {native}, the driver {what} needs")
    floors = TRITON_DATACENTER_DRIVERS.get(triton, {})
    branch = _branch(driver)
    if branch in floors:
        if have >= version_tuple(floors[branch]):
            return DriverVerdict(True, f"{driver} >= {floors[branch]}, the least R{branch} driver {what} allows")
        return DriverVerdict(
            False, f"{driver} is older than {floors[branch]}, the least R{branch} driver {what} allows", options
        )
    if branch == _branch(native):
        return DriverVerdict(False, f"{driver} is older than {native}, the least driver {what} allows", options)
    compat = CUDA_MINOR_COMPAT_DRIVER.get(cuda.split(".", 1)[0])
    if compat is None or have < version_tuple(compat):
        return DriverVerdict(False, f"{driver} is too old for {what}: it allows {options}", options)
    return DriverVerdict(
        None,
        f"{driver} (R{branch}) is not among the drivers {what}'s release notes allow ({options}); it would run "
        f"only through CUDA minor-version compatibility, with limited features",
        options,
    )


def _verdict_without_notes(what: str, cuda: str, driver: str, options: str) -> DriverVerdict:
    """A release whose notes name no driver: below its CUDA major's minor-version compatibility floor the
    container cannot start; at or above it, it runs, but whether with every feature is not known."""
    floor = CUDA_MINOR_COMPAT_DRIVER.get(_branch(cuda))
    if floor is None or version_tuple(driver) < version_tuple(floor):
        return DriverVerdict(False, f"{driver} is too old for {what}: it needs {options}", options)
    return DriverVerdict(
        None,
        f"{driver} >= {floor} runs {what} through CUDA minor-version compatibility; the release notes name no "
        "driver, so whether it has every feature is not known",
        options,
    )


#: First Triton release with a TensorRT-LLM backend container (stack-facts.md; the 23.10 server release,
#: https://github.com/triton-inference-server/server/releases/tag/v2.39.0, introduces the backend).
TRITON_FIRST_TRTLLM = "23.10"

#: TensorRT-LLM release (major.minor) -> matching Triton release (stack-facts.md; 24.02's release notes,
#: https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-24-02.html, name
#: TensorRT-LLM release/0.8).
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


#: The first Kubernetes release whose kubelet no longer falls back when the runtime answers no CRI
#: ``RuntimeConfig`` (kubelet 1.37's ``getCgroupDriverFromCRI`` counts it as support lost in 1.38.0).
RUNTIME_CONFIG_REQUIRED = (1, 38)
#: The first containerd whose CRI server answers ``RuntimeConfig`` (1.7.28, the newest 1.7, does not).
CONTAINERD_WITH_RUNTIME_CONFIG = "2.0"


def containerd_minimum(kubernetes: str) -> str:
    """The oldest containerd the kubelet of ``kubernetes`` runs with ("" when any does)."""
    return CONTAINERD_WITH_RUNTIME_CONFIG if version_tuple(kubernetes)[:2] >= RUNTIME_CONFIG_REQUIRED else ""


def kubeadm_api_for(kubernetes: str) -> str:
    """kubeadm config API for a Kubernetes version: v1beta3 for 1.22-1.30, v1beta4 from 1.31 (1.37 reads it too)."""
    return "kubeadm.k8s.io/v1beta4" if version_tuple(kubernetes)[:2] >= (1, 31) else "kubeadm.k8s.io/v1beta3"


def operator_line(chart: str) -> str:
    """'v22.9.2' -> 'v22.9'."""
    major_minor = version_tuple(chart)[:2]
    return "v" + ".".join(str(p) for p in major_minor)


def operator_default_driver(chart: str) -> str | None:
    """The default driver of GPU Operator chart release ``chart`` ('v25.10.0' or '25.10.0'); None if unknown."""
    return OPERATOR_DEFAULT_DRIVER.get("v" + chart.lstrip("v"))
