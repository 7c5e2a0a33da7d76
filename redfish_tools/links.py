"""Reading Redfish link objects (``{"@odata.id": ...}``) and paged collections; shared by the connection
and the resources."""

from __future__ import annotations

from collections.abc import Callable
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


def members_of(get: Callable[[str], dict[str, Any]], collection_uri: str) -> list[Any]:
    """Every ``Members`` entry of a collection, following ``Members@odata.nextLink`` pages (the one
    pagination: plain and ``$expand``-ed collections, the connection and the resources all use it)."""
    items: list[Any] = []
    seen: set[str] = set()
    next_uri: str | None = collection_uri
    while next_uri and next_uri not in seen:
        seen.add(next_uri)
        body = get(next_uri)
        items.extend(body.get("Members", []))
        next_uri = body.get("Members@odata.nextLink") or None
    return items


def member_uris(get: Callable[[str], dict[str, Any]], collection_uri: str) -> list[str]:
    """URIs of a collection's members, across its pages."""
    return [odata_id(m) for m in members_of(get, collection_uri) if odata_id(m)]
