""" "Not implemented yet" stages for every stage name; real stages replace them when registered."""

from __future__ import annotations

from bootstrap.stages.base import _REGISTRY, _REGISTRY_LOCK, STAGE_ORDER, NotImplementedYet, Stage

#: What each stage will do, shown by ``plan`` while it is still a placeholder.
DESCRIPTIONS: dict[str, str] = {
    "preflight": "Check the inventory, this machine's tools and each BMC's reachability",
    "discover": "Read each node's hardware (CPUs, memory, GPUs, NICs, disks) over Redfish",
    "firmware": "Bring BIOS, iDRAC, NIC and GPU firmware to the validated versions",
    "bios": "Apply the BIOS profile for the node's role (Server Configuration Profile)",
    "provision": "PXE-boot and install the operating system image (wipes the boot disk)",
    "os-check": "Check each installed node over SSH (OS, memory, disk, commands) with Ansible",
    "network": "Configure bonds, VLANs and MTU of the management and storage networks",
    "kubernetes": "Install containerd and kubeadm, form the HA control plane, join workers",
    "nvidia": "Install the NVIDIA GPU Operator (driver, toolkit, device plugin, DCGM)",
    "triton": "Deploy Triton Inference Server with the model repository",
}


def placeholder_for(name: str) -> type[Stage]:
    """A placeholder class for stage ``name``."""
    return type(
        f"{name.capitalize()}NotImplemented",
        (NotImplementedYet,),
        {"name": name, "description": DESCRIPTIONS[name], "__module__": __name__},
    )


def register_placeholders() -> None:
    """Fill every name that has no stage yet with its placeholder."""
    with _REGISTRY_LOCK:
        for name in STAGE_ORDER:
            _REGISTRY.setdefault(name, placeholder_for(name)())
