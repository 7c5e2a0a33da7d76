"""The Dell URIs an emulated iDRAC serves, and the Redfish collection body."""

from __future__ import annotations

from typing import Any

V1 = "/redfish/v1"
SYS = f"{V1}/Systems/System.Embedded.1"
MGR = f"{V1}/Managers/iDRAC.Embedded.1"
CH = f"{V1}/Chassis/System.Embedded.1"
SEG = r"(?P<{}>[^/]+)"


def collection(odata_id: str, name: str, members: list[str], odata_type: str) -> dict[str, Any]:
    return {
        "@odata.id": odata_id,
        "@odata.type": f"#{odata_type}.{odata_type}",
        "Name": name,
        "Members": [{"@odata.id": m} for m in members],
        "Members@odata.count": len(members),
    }
