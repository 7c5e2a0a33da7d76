"""Navigation from the service root by links: systems, managers, chassis, services, OEM actions.

Paths are never hard-coded where the service publishes a link; Dell OEM actions are matched on the suffix of
their name (``#DellLCService.GetRemoteServicesAPIStatus``), so 15G/16G renames do not break them.
"""

from __future__ import annotations

from typing import Any

from redfish_tools.connection import BmcConnection
from redfish_tools.errors import NotFoundError
from redfish_tools.links import link, member_uris, members_of, odata_id
from redfish_tools.views import ServiceRoot


class Service:
    """A BMC's resource tree, read lazily through one connection. Reads of the same URI are cached.

    ``fresh=True`` bypasses the cache: every confirmation read uses it.
    """

    PREFERRED_SYSTEM = "System.Embedded.1"
    PREFERRED_MANAGER = "iDRAC.Embedded.1"

    def __init__(self, conn: BmcConnection) -> None:
        self.conn = conn
        self._cache: dict[str, dict[str, Any]] = {}

    @property
    def name(self) -> str:
        return self.conn.target.name

    @property
    def root(self) -> dict[str, Any]:
        return self.conn.root

    def get(self, uri: str, *, fresh: bool = False) -> dict[str, Any]:
        """GET ``uri`` (cached unless ``fresh``)."""
        if fresh or uri not in self._cache:
            self._cache[uri] = self.conn.get(uri)
        return self._cache[uri]

    def forget(self, uri: str) -> None:
        """Drop a cached resource (after changing it)."""
        self._cache.pop(uri, None)

    # -- collections ----------------------------------------------------------------------------------
    @property
    def supports_expand(self) -> bool:
        """Whether the service advertises ``$expand`` (one request per collection, not one per member)."""
        return ServiceRoot.from_json(self.root).supports_expand

    def member_uris(self, collection_uri: str) -> list[str]:
        """URIs of a collection's members (following ``Members@odata.nextLink``)."""
        return member_uris(self.get, collection_uri)

    def members(self, collection_uri: str) -> list[dict[str, Any]]:
        """The members of a collection, expanded in one request when the service supports it."""
        if not collection_uri:
            return []
        if self.supports_expand:
            items = members_of(self.get, f"{collection_uri}?$expand=.($levels=1)")
            if items and all(isinstance(m, dict) and len(m) > 1 for m in items):
                return items
        return [self.get(uri) for uri in self.member_uris(collection_uri)]

    def _pick(self, collection_key: str, preferred: str) -> str:
        coll = link(self.root, collection_key)
        if not coll:
            raise NotFoundError(f"the service root has no {collection_key} link", bmc=self.name, uri="/redfish/v1/")
        uris = self.member_uris(coll)
        if not uris:
            raise NotFoundError(f"{collection_key} is empty", bmc=self.name, uri=coll)
        return next((u for u in uris if u.rstrip("/").endswith(preferred)), uris[0])

    # -- well-known resources -------------------------------------------------------------------------
    def system_uri(self) -> str:
        """The computer system (``System.Embedded.1`` on an iDRAC)."""
        return self._pick("Systems", self.PREFERRED_SYSTEM)

    def manager_uri(self) -> str:
        """The BMC itself (``iDRAC.Embedded.1``)."""
        return self._pick("Managers", self.PREFERRED_MANAGER)

    def chassis_uri(self) -> str:
        """The main chassis (``System.Embedded.1``)."""
        return self._pick("Chassis", self.PREFERRED_SYSTEM)

    def system(self, *, fresh: bool = False) -> dict[str, Any]:
        return self.get(self.system_uri(), fresh=fresh)

    def manager(self, *, fresh: bool = False) -> dict[str, Any]:
        return self.get(self.manager_uri(), fresh=fresh)

    def chassis(self, *, fresh: bool = False) -> dict[str, Any]:
        return self.get(self.chassis_uri(), fresh=fresh)

    def service_uri(self, key: str) -> str:
        """A top-level service (UpdateService, TaskService, JobService…) from the root; '' if absent."""
        return link(self.root, key)

    def oem_dell_link(self, resource: dict[str, Any], name: str) -> str:
        """A Dell OEM link of a resource, under ``Links.Oem.Dell`` or ``Oem.Dell`` ('' if absent)."""
        return link(resource, "Links", "Oem", "Dell", name) or link(resource, "Oem", "Dell", name)


def find_action(resource: dict[str, Any], suffix: str) -> str:
    """Target URI of the action whose name ends with ``suffix`` (standard or OEM), '' if none."""

    def walk(actions: Any) -> str:
        if not isinstance(actions, dict):
            return ""
        for key, value in actions.items():
            if key == "Oem":
                found = walk(value)
                if found:
                    return found
            elif isinstance(value, dict):
                if key.endswith(suffix) and value.get("target"):
                    return str(value["target"])
                nested = walk(value) if not key.startswith("#") else ""
                if nested:
                    return nested
        return ""

    return walk(resource.get("Actions", {}))


def require_action(service: Service, resource: dict[str, Any], suffix: str, where: str) -> str:
    """Like :func:`find_action`, raising :class:`NotFoundError` naming the resource when missing."""
    target = find_action(resource, suffix)
    if not target:
        raise NotFoundError(f"no {suffix} action", bmc=service.name, uri=where or odata_id(resource))
    return target


def allowable(resource: dict[str, Any], action_suffix: str, parameter: str) -> list[str]:
    """``<parameter>@Redfish.AllowableValues`` of an action (empty when not published)."""

    def walk(actions: Any) -> list[str]:
        if not isinstance(actions, dict):
            return []
        for key, value in actions.items():
            if not isinstance(value, dict):
                continue
            if key.endswith(action_suffix):
                return list(value.get(f"{parameter}@Redfish.AllowableValues", []))
            if key == "Oem" or not key.startswith("#"):
                found = walk(value)
                if found:
                    return found
        return []

    return walk(resource.get("Actions", {}))
