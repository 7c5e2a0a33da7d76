"""Reading Redfish link objects (``{"@odata.id": ...}``); shared by the connection and the resources."""

from __future__ import annotations

from typing import Any


def odata_id(obj: Any) -> str:
    """The ``@odata.id`` of a link object ('' when absent)."""
    return str(obj.get("@odata.id", "")) if isinstance(obj, dict) else ""


def link(obj: dict[str, Any], *keys: str) -> str:
    """Follow nested keys to a link object and return its URI ('' when any step is missing)."""
    cur: Any = obj
    for key in keys:
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(key)
    return odata_id(cur)
