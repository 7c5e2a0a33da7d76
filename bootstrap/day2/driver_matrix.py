"""The version facts ``rackctl driver upgrade`` checks against, as data (the one place to update them).

- :data:`OPERATOR_KNOWN_DRIVERS`: per GPU Operator chart line, every data-center driver version the
  "NVIDIA GPU Driver" row of the line's component matrix names, over the line's patch releases and the
  recommended updates NVIDIA added to the page after release. A version of a listed branch that is not
  named passes with a warning (patch releases are added over time).
- :data:`OPERATOR_DRIVER_BRANCHES`: the branches (major versions) of those drivers, derived.
- Sources: NVIDIA GPU Operator documentation, "Platform Support" → "GPU Operator Component Matrix"
  (the page includes ``life-cycle-policy.rst``), read in every published revision of the documentation
  source, https://github.com/NVIDIA/cloud-native-docs, tags ``gpu-operator-v<line>*``; per line:

  - v22.9: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/22.9.2/platform-support.html
    (one row per release v22.9.0, v22.9.1, v22.9.2; tag ``gpu-operator-v22.9.2``);
  - v23.9: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/23.9.2/platform-support.html and
    the 23.9.0/23.9.1 pages (tags ``gpu-operator-v23.9.0-9``, ``-v23.9.1-21``, ``-v23.9.2-7``);
  - v24.3: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/24.3.0/platform-support.html
    (tags ``gpu-operator-v24.3.0`` … ``-v24.3.0-14``);
  - v24.6: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/24.6.2/platform-support.html and
    the 24.6.0/24.6.1 pages (tags ``gpu-operator-v24.6.0`` … ``-v24.6.2-7``);
  - v24.9: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/24.9/platform-support.html
    (per-release columns v24.9.0 to v24.9.2; tag ``gpu-operator-v24.9-8``);
  - v25.3: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/25.3/platform-support.html
    (per-release columns v25.3.0 to v25.3.4; tags ``gpu-operator-v25.3.0`` … ``-v25.3-16``);
  - v25.10: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/25.10/platform-support.html
    (columns v25.10.0, v25.10.1; tag ``gpu-operator-v25.10-45``).

  The same pages state "The GPU Operator is supported on all active NVIDIA data center production
  drivers": a branch not listed here is refused by rackctl as unvalidated, not as proven broken.
- The chart's default driver per release: ``OPERATOR_DEFAULT_DRIVER`` in
  :mod:`bootstrap.inventory.profiles` (from each release's ``values.yaml``).
- Triton's CUDA and driver requirements per release: ``TRITON_CUDA``, ``TRITON_DATACENTER_DRIVERS`` and
  ``triton_driver_verdict`` in :mod:`bootstrap.inventory.profiles` (the inventory rules use them too),
  re-exported here so the driver checks read one module; sources are cited there.
- Fabric Manager: on NVSwitch systems the host's ``nvidia-fabricmanager-<branch>`` must be exactly the
  driver's version (``/work/shared/reference/stack-facts.md``).
"""

from __future__ import annotations

from bootstrap.inventory.profiles import (
    OPERATOR_DEFAULT_DRIVER,
    TRITON_CUDA,
    TRITON_DATACENTER_DRIVERS,
    DriverVerdict,
    triton_driver_verdict,
)

__all__ = [
    "OPERATOR_DEFAULT_DRIVER",
    "OPERATOR_DRIVER_BRANCHES",
    "OPERATOR_KNOWN_DRIVERS",
    "OPERATOR_UPGRADE_POLICY",
    "TRITON_CUDA",
    "TRITON_DATACENTER_DRIVERS",
    "DriverVerdict",
    "triton_driver_verdict",
]

#: GPU Operator chart line -> exact driver versions its component matrix names (newest first).
OPERATOR_KNOWN_DRIVERS: dict[str, tuple[str, ...]] = {
    "v22.9": (
        "525.85.12",
        "525.60.13",
        "520.61.05",
        "515.86.01",
        "515.65.01",
        "510.108.03",
        "510.85.02",
        "470.161.03",
        "470.141.03",
        "450.216.04",
        "450.203.03",
    ),
    "v23.9": (
        "550.54.15",
        "550.54.14",
        "535.161.08",
        "535.161.07",
        "535.154.05",
        "535.129.03",
        "535.104.12",
        "525.147.05",
        "470.239.06",
        "470.223.02",
    ),
    "v24.3": (
        "560.35.03",
        "550.127.05",
        "550.90.07",
        "550.54.15",
        "535.216.01",
        "535.183.01",
        "535.161.08",
        "470.256.02",
        "470.239.06",
    ),
    "v24.6": (
        "560.35.03",
        "550.144.03",
        "550.127.08",
        "550.127.05",
        "550.90.12",
        "550.90.07",
        "535.230.02",
        "535.216.01",
        "535.183.06",
    ),
    "v24.9": (
        "580.65.06",
        "575.57.08",
        "570.172.08",
        "570.158.01",
        "570.148.08",
        "570.133.20",
        "570.86.15",
        "565.57.01",
        "560.35.03",
        "550.163.01",
        "550.144.03",
        "550.127.08",
        "550.127.05",
        "535.261.03",
        "535.247.01",
        "535.230.02",
        "535.216.03",
        "535.216.01",
    ),
    "v25.3": (
        "590.48.01",
        "580.126.16",
        "580.126.09",
        "580.95.05",
        "580.82.07",
        "580.65.06",
        "575.57.08",
        "570.211.01",
        "570.172.08",
        "570.158.01",
        "570.148.08",
        "570.133.20",
        "570.124.06",
        "570.86.15",
        "550.163.01",
        "535.288.01",
        "535.261.03",
        "535.247.01",
    ),
    "v25.10": (
        "610.57.04",
        "595.91.07",
        "595.71.05",
        "595.58.03",
        "590.48.01",
        "580.178.04",
        "580.167.08",
        "580.159.04",
        "580.159.03",
        "580.126.16",
        "580.126.09",
        "580.105.08",
        "580.95.05",
        "580.82.07",
        "575.57.08",
        "570.211.01",
        "570.195.03",
        "550.163.01",
        "535.309.01",
        "535.288.01",
        "535.274.02",
    ),
}


def _branches(versions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({v.split(".", 1)[0] for v in versions}, key=int))


#: GPU Operator chart line -> driver branches (major versions) its component matrix names.
OPERATOR_DRIVER_BRANCHES: dict[str, tuple[str, ...]] = {
    line: _branches(versions) for line, versions in OPERATOR_KNOWN_DRIVERS.items()
}

#: The operator's own rolling driver upgrade defaults (``driver.upgradePolicy`` in the chart's values.yaml,
#: https://github.com/NVIDIA/gpu-operator/blob/v25.10.0/deployments/gpu-operator/values.yaml; ``maxUnavailable``
#: exists from v23.9.0, v22.9.x has only ``autoUpgrade`` and ``maxParallelUpgrades``).
OPERATOR_UPGRADE_POLICY: dict[str, object] = {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
