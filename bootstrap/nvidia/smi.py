"""``nvidia-smi -q -x`` (the XML report, DTD ``nvsmi_device_v12.dtd``): driver, GPUs, MIG and fabric state."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from bootstrap.errors import InvalidInput, Problem


@dataclass(frozen=True)
class Gpu:
    """One GPU of the report."""

    bus_id: str
    product: str
    mig_current: str
    fabric_state: str
    fabric_status: str

    @property
    def fabric_ready(self) -> bool:
        """Registered with Fabric Manager (only NVSwitch systems report a fabric state other than N/A)."""
        return self.fabric_state == "Completed" and self.fabric_status == "Success"


@dataclass(frozen=True)
class SmiReport:
    driver_version: str
    cuda_version: str
    gpus: list[Gpu]


def _text(node: ET.Element | None, path: str, default: str = "N/A") -> str:
    found = node.find(path) if node is not None else None
    return (found.text or default).strip() if found is not None else default


def parse(xml_text: str, source: str = "nvidia-smi -q -x") -> SmiReport:
    """Parse the report; a file that is not one fails naming ``source``."""
    try:
        root = ET.fromstring(xml_text)  # noqa: S314 - see the import
    except ET.ParseError as exc:
        raise InvalidInput(
            f"{source} is not nvidia-smi XML",
            problems=[Problem(source, str(exc), "give the output of `nvidia-smi -q -x`")],
        ) from None
    if root.tag != "nvidia_smi_log":
        raise InvalidInput(
            f"{source} is not nvidia-smi XML",
            problems=[Problem(source, f"root element <{root.tag}>", "give the output of `nvidia-smi -q -x`")],
        )
    gpus = [
        Gpu(
            bus_id=gpu.get("id", ""),
            product=_text(gpu, "product_name"),
            mig_current=_text(gpu, "mig_mode/current_mig"),
            fabric_state=_text(gpu, "fabric/state"),
            fabric_status=_text(gpu, "fabric/status"),
        )
        for gpu in root.findall("gpu")
    ]
    return SmiReport(driver_version=_text(root, "driver_version"), cuda_version=_text(root, "cuda_version"), gpus=gpus)
