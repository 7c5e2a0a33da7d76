"""``nvidia-smi -q -x`` (the XML report, DTD ``nvsmi_device_v12.dtd``): driver, GPUs, MIG and fabric state."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


#: Where role ``nvidia_host`` (``tasks/smi.yml``) read nvidia-smi, in its report's ``nvidia_smi.source``.
HOST, OPERATOR = "host", "operator driver container"


@dataclass(frozen=True)
class SmiRead:
    """What role ``nvidia_host``'s nvidia-smi read gave on one node: the report, which nvidia-smi was read
    (:data:`HOST` or :data:`OPERATOR`; empty when none was found) and, without a report, why not."""

    source: str
    report: SmiReport | None = None
    why: str | None = None

    @property
    def where(self) -> str:
        """Which nvidia-smi, in words (for messages)."""
        return {HOST: "the host's nvidia-smi", OPERATOR: "nvidia-smi in the GPU Operator's driver container"}.get(
            self.source, "no nvidia-smi"
        )


def read_from_role(report: Mapping[str, Any], node: str) -> SmiRead:
    """:class:`SmiRead` of the role's ``nvidia_host_smi_report`` (``nvidia_smi_xml`` and ``nvidia_smi``: source,
    command, rc, error, looked_at); a report without ``nvidia_smi`` (recorded before it existed) is the host's."""
    how = report.get("nvidia_smi")
    how = how if isinstance(how, Mapping) else {"source": HOST if report.get("nvidia_smi_xml") else ""}
    source = str(how.get("source") or "")
    xml = report.get("nvidia_smi_xml") or ""
    if xml:
        try:
            return SmiRead(source, parse(xml, f"nvidia-smi -q -x on {node}"))
        except InvalidInput as exc:
            return SmiRead(source, why=f"{exc.message}: {exc.problems[0].message}" if exc.problems else exc.message)
    if not source:
        looked = " and ".join(str(p) for p in how.get("looked_at") or []) or "the host and the driver container"
        return SmiRead(
            source,
            why=f"no nvidia-smi on the node (looked for {looked}): neither a host driver nor the GPU Operator's driver "
            "container is there (yet)",
        )
    said = str(how.get("error") or "").strip() or "no output"
    return SmiRead(source, why=f"`{how.get('command') or 'nvidia-smi -q -x'}` exited {how.get('rc', '?')}: {said}")
