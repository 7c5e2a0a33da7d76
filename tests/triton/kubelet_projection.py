"""A stand-in for the kubelet projecting a ConfigMap volume with ``items`` (no kubelet runs here).

Lays a directory out as the kubelet's atomic writer (``pkg/volume/util/atomic_writer.go``) does: the payload
in a timestamped directory ``..<timestamp>``, the symlink ``..data`` to it, and one symlink per top-level
name of the payload (``repository -> ..data/repository``); each item's key written at its ``path`` with
the volume's default mode 0644. Only the listed items are projected.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def project_config_map(config_map: dict[str, Any], volume: dict[str, Any], where: Path) -> Path:
    """Project ``config_map`` as the pod volume ``volume`` (``{configMap: {name, items}}``) at ``where``."""
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + f"{time.time_ns() % 10**9:09d}"
    payload = where / stamp
    payload.mkdir(parents=True)
    top = set()
    for item in volume["configMap"]["items"]:
        path = payload / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_map["data"][item["key"]], encoding="utf-8")
        path.chmod(0o644)
        top.add(item["path"].split("/")[0])
    os.symlink(stamp, where / "..data")
    for name in sorted(top):
        os.symlink(f"..data/{name}", where / name)
    return where
