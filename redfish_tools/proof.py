"""Proof that rackctl can work a BMC: more than a TCP connect.

:func:`prove_bmc` runs on a connection :func:`redfish_tools.fleet.run_on_bmc` has opened, which already read
the service root over TLS verified against the CA bundle or the pinned fingerprint and logged in (a session
created with the credential; deleted when the connection closes). It then reads the manager with that
credential (an authenticated read, so a basic-auth fallback proves the credential too), and returns the
Redfish version and the iDRAC firmware. Any failure raises the engine's :class:`RedfishError` with its
cause (TLS problem, rejected credential, timeout), which the fleet reports per node.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service
from redfish_tools.views import Manager, ServiceRoot


@dataclass(frozen=True)
class BmcProof:
    """What one BMC proved: its Redfish version and iDRAC firmware, how rackctl logged in, the TLS mode."""

    redfish_version: str
    idrac_firmware: str
    auth: str
    tls: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return f"Redfish {self.redfish_version}, iDRAC {self.idrac_firmware} ({self.auth}, tls {self.tls})"


def prove_bmc(conn: BmcConnection) -> BmcProof:
    """Read the Redfish version and, with the credential, the iDRAC firmware; raise with the cause if not."""
    version = str(ServiceRoot.from_json(conn.root).redfish_version or "")
    if not version:
        raise E.ValidationError("the service root names no RedfishVersion", bmc=conn.target.name, uri="/redfish/v1")
    service = Service(conn)
    manager = service.manager(fresh=True)  # authenticated: a rejected credential fails here at the latest
    firmware = str(Manager.from_json(manager).firmware_version or "")
    if not firmware:
        raise E.ValidationError(
            "the manager reports no FirmwareVersion", bmc=conn.target.name, uri=service.manager_uri()
        )
    return BmcProof(version, firmware, conn.auth_mode or "none", conn.target.tls.describe())
