"""The version facts ``rackctl driver upgrade`` checks against, as data (the one place to update them).

- :data:`OPERATOR_DRIVER_BRANCHES`: per GPU Operator chart line, the data-center driver branches its
  component matrix lists (NVIDIA GPU Operator "Platform Support" / "Component Matrix" pages and release
  notes; v24.6 checked against the docs' life-cycle page: 560.35.03, 550.90.12, 550.90.07, 535.183.06).
- :data:`OPERATOR_KNOWN_DRIVERS`: exact driver versions a line's matrix names, where known; a version of
  a supported branch that is not listed is allowed with a warning (patch releases are added over time).
- Triton's CUDA and minimum driver per release live in ``bootstrap.inventory.profiles.TRITON_CUDA`` (the
  inventory rules use them too); they are re-exported here so the driver checks read one module.
- Fabric Manager: on NVSwitch systems the host's ``nvidia-fabricmanager-<branch>`` must be exactly the
  driver's version (``/work/shared/reference/stack-facts.md``).
"""

from __future__ import annotations

from bootstrap.inventory.profiles import OPERATOR_DEFAULT_DRIVER, TRITON_CUDA

__all__ = [
    "OPERATOR_DEFAULT_DRIVER",
    "OPERATOR_DRIVER_BRANCHES",
    "OPERATOR_KNOWN_DRIVERS",
    "OPERATOR_UPGRADE_POLICY",
    "TRITON_CUDA",
]

#: GPU Operator chart line -> driver branches (major versions) its component matrix supports.
OPERATOR_DRIVER_BRANCHES: dict[str, tuple[str, ...]] = {
    "v22.9": ("470", "515", "520", "525"),
    "v23.9": ("470", "525", "535", "545"),
    "v24.3": ("470", "535", "550"),
    "v24.6": ("535", "550", "560"),
    "v24.9": ("535", "550", "560", "565"),
    "v25.3": ("535", "550", "570", "575", "580"),
    "v25.10": ("535", "550", "570", "575", "580"),
}

#: GPU Operator chart line -> exact driver versions its matrix names (defaults included).
OPERATOR_KNOWN_DRIVERS: dict[str, tuple[str, ...]] = {
    "v22.9": ("525.60.13", "525.85.12"),
    "v23.9": ("535.104.12", "535.129.03"),
    "v24.3": ("550.54.15", "550.90.07", "535.183.01"),
    "v24.6": ("560.35.03", "550.90.12", "550.90.07", "535.183.06"),
    "v24.9": ("550.127.05", "550.127.08", "560.35.03", "565.57.01"),
    "v25.3": ("570.124.06", "570.172.08", "575.57.08", "580.65.06", "580.82.07", "580.95.05"),
    "v25.10": ("580.95.05", "580.82.07", "575.57.08", "570.195.03"),
}

#: The operator's own rolling driver upgrade defaults (``driver.upgradePolicy``).
OPERATOR_UPGRADE_POLICY: dict[str, object] = {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
