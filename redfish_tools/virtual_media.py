"""Virtual media insert/eject (CD slot), idempotent and confirmed by reading back."""

from __future__ import annotations

from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service, find_action, link
from redfish_tools.views import VirtualMedia


def media_slots(svc: Service) -> list[VirtualMedia]:
    """Virtual media slots, from the system (iDRAC >= 6.00) or the manager (older firmware)."""
    for resource in (svc.system(), svc.manager()):
        coll = link(resource, "VirtualMedia")
        if coll:
            svc.forget(coll)
            return [VirtualMedia.from_json(svc.get(uri, fresh=True)) for uri in svc.member_uris(coll)]
    raise E.NotFoundError("no VirtualMedia collection on the system or manager", bmc=svc.name)


def _cd_slot(svc: Service, slot: str | None) -> VirtualMedia:
    slots = media_slots(svc)
    if slot:
        chosen = next((s for s in slots if s.id == slot), None)
    else:
        chosen = next((s for s in slots if any(t in ("CD", "DVD") for t in s.media_types)), None)
        chosen = chosen or (slots[0] if slots else None)
    if chosen is None:
        raise E.NotFoundError(f"virtual media slot {slot or 'CD'} not found", bmc=svc.name)
    return chosen


def insert_media(conn: BmcConnection, image: str, *, slot: str | None = None) -> dict[str, Any]:
    """Insert ``image`` (URL of an ISO); if another image is inserted it is ejected first."""
    svc = Service(conn)
    media = _cd_slot(svc, slot)
    uri = media.raw["@odata.id"]
    if media.inserted and media.image == image:
        return {"slot": media.id, "image": image, "changed": False}
    if media.inserted:
        eject_media(conn, slot=media.id)
    action = find_action(media.raw, "InsertMedia")
    if not action:
        raise E.NotFoundError("no InsertMedia action", bmc=conn.target.name, uri=uri)
    conn.post(action, {"Image": image, "Inserted": True, "WriteProtected": True})
    after = VirtualMedia.from_json(svc.get(uri, fresh=True))
    if not after.inserted or after.image != image:
        raise E.OperationNotConfirmed(
            f"virtual media reads {after.image!r}, expected {image!r}", bmc=conn.target.name, uri=uri
        )
    return {"slot": media.id, "image": image, "changed": True}


def eject_media(conn: BmcConnection, *, slot: str | None = None) -> dict[str, Any]:
    """Eject the slot's media (nothing to do when empty)."""
    svc = Service(conn)
    media = _cd_slot(svc, slot)
    uri = media.raw["@odata.id"]
    if not media.inserted:
        return {"slot": media.id, "changed": False}
    action = find_action(media.raw, "EjectMedia")
    if not action:
        raise E.NotFoundError("no EjectMedia action", bmc=conn.target.name, uri=uri)
    conn.post(action, {})
    if VirtualMedia.from_json(svc.get(uri, fresh=True)).inserted:
        raise E.OperationNotConfirmed("virtual media still inserted after eject", bmc=conn.target.name, uri=uri)
    return {"slot": media.id, "changed": True}
