"""Built-in hardware: Dell PowerEdge models of the validated design, their GPUs and BIOS profiles.

Users extend these in the inventory (``hardware_models:``, ``bios_profiles:``); built-ins are the defaults.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GpuType(BaseModel):
    """A GPU a model can carry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Short name used in the inventory, e.g. L40S, H100-SXM.")
    product: str = Field(description="Product name as nvidia-smi / Redfish report it.")
    memory_gb: int = Field(gt=0, description="GPU memory in GB.")
    mig: bool = Field(description="Whether the GPU supports MIG partitioning.")
    label: str = Field(description="Value of the nvidia.com/gpu.product node label GPU feature discovery sets.")


GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType(name="L40S", product="NVIDIA L40S", memory_gb=48, mig=False, label="NVIDIA-L40S"),
        GpuType(name="H100-PCIe", product="NVIDIA H100 PCIe", memory_gb=80, mig=True, label="NVIDIA-H100-PCIe"),
        GpuType(
            name="H100-SXM",
            product="NVIDIA H100 80GB HBM3",
            memory_gb=80,
            mig=True,
            label="NVIDIA-H100-80GB-HBM3",
        ),
    )
}

#: MIG configurations of the GPU operator's default mig-parted config (80 GB H100).
MIG_PROFILES_80GB = (
    "all-disabled",
    "all-enabled",
    "all-1g.10gb",
    "all-1g.20gb",
    "all-2g.20gb",
    "all-3g.40gb",
    "all-4g.40gb",
    "all-7g.80gb",
    "all-balanced",
)


class HardwareModel(BaseModel):
    """A server model: what rackctl expects to find and how it configures it."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    redfish_model: str = Field(description="Model string the iDRAC reports, e.g. 'PowerEdge R660'.")
    roles: list[str] = Field(description="Roles this model may take: head, control-plane, worker.")
    gpu_types: list[str] = Field(default_factory=list, description="GPU types it can carry.")
    gpu_counts: list[int] = Field(default_factory=lambda: [0], description="Allowed GPU counts.")
    nvswitch: bool = Field(default=False, description="GPUs connected through NVSwitch (needs Fabric Manager).")
    nics: dict[str, str] = Field(
        default_factory=dict, description="Interface role -> default NIC FQDD (pxe, management, ...)."
    )
    bios_profile: dict[str, str] = Field(
        default_factory=dict, description="Role -> BIOS profile name applied by default."
    )

    @property
    def fabric_manager(self) -> bool:
        """Fabric Manager applies iff the GPUs sit behind NVSwitches (XE9680); XE8640 has none."""
        return self.nvswitch


_HEAD_NICS = {"pxe": "NIC.Embedded.1-1-1", "management": "NIC.Integrated.1-1-1"}
_GPU_NICS = {"pxe": "NIC.Embedded.1-1-1", "management": "NIC.Integrated.1-1-1", "storage": "NIC.Slot.1-1-1"}
_GPU_ROLES = {"worker": "gpu-worker"}


def _gpu_worker(
    model: str, gpus: str, gpu_types: list[str], gpu_counts: list[int], *, nvswitch: bool = False
) -> HardwareModel:
    """A PowerEdge GPU chassis: a worker only, with the GPU nodes' NICs and BIOS profile."""
    return HardwareModel(
        description=f"PowerEdge {model}: {gpus}",
        redfish_model=f"PowerEdge {model}",
        roles=["worker"],
        gpu_types=gpu_types,
        gpu_counts=gpu_counts,
        nvswitch=nvswitch,
        nics=_GPU_NICS,
        bios_profile=_GPU_ROLES,
    )


BUILTIN_MODELS: dict[str, HardwareModel] = {
    "R660": HardwareModel(
        description="PowerEdge R660: head node and Kubernetes control plane",
        redfish_model="PowerEdge R660",
        roles=["head", "control-plane", "worker"],
        nics=_HEAD_NICS,
        bios_profile={"head": "control-plane", "control-plane": "control-plane", "worker": "control-plane"},
    ),
    "R760xa": _gpu_worker(
        "R760xa",
        "2 or 4 x L40S 48 GB, or 2 or 4 x H100 PCIe 80 GB (NVLink bridge pairs)",
        ["L40S", "H100-PCIe"],
        [2, 4],
    ),
    "XE8640": _gpu_worker("XE8640", "4 x H100 SXM 80 GB, NVLink without NVSwitch", ["H100-SXM"], [4]),
    "XE9680": _gpu_worker(
        "XE9680", "8 x H100 SXM 80 GB with NVSwitch (Fabric Manager)", ["H100-SXM"], [8], nvswitch=True
    ),
}

#: what every built-in BIOS profile sets
_BASE_BIOS = {
    "BootMode": "Uefi",
    "SysProfile": "PerfOptimized",
    "ProcVirtualization": "Enabled",
    "LogicalProc": "Enabled",
}
#: BIOS attribute sets (iDRAC 9 attribute names) applied per role.
BUILTIN_BIOS_PROFILES: dict[str, dict[str, str]] = {
    "control-plane": dict(_BASE_BIOS),
    "gpu-worker": {**_BASE_BIOS, "SriovGlobalEnable": "Enabled", "ProcX2Apic": "Enabled"},
}
