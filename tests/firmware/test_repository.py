"""A baseline whose images come from a Dell repository (catalog): InstallFromRepository on each node, the
jobs it makes followed like SimpleUpdate's (iDRAC first, host components in one reboot)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fwlab import BASELINE_VERSIONS, BIOS_IMAGE, IDRAC_IMAGE, NIC_IMAGE, FwLab
from test_rollout import apply, run

CATALOG = """<?xml version="1.0" encoding="utf-8"?>
<Manifest baseLocation="" version="23.11.00">
{components}
</Manifest>
"""
COMPONENT = """  <SoftwareComponent path="FOLDER{n:05d}M/1/{file}" vendorVersion="{version}">
    <SupportedSystems><Brand><Model systemID="0B1C"><Display>{model}</Display></Model></Brand></SupportedSystems>
  </SoftwareComponent>"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[str]:
    """A Dell repository share on loopback: ``/repo/Catalog.xml`` (the packages themselves are never fetched)."""
    root = tmp_path / "share"
    (root / "repo").mkdir(parents=True)
    parts, n = [], 0
    for model in ("R660", "R760xa", "XE8640", "XE9680"):
        for file, version in (
            (IDRAC_IMAGE, BASELINE_VERSIONS["idrac"]),
            (BIOS_IMAGE.format(tag=model.upper()), BASELINE_VERSIONS["bios"]),
            (NIC_IMAGE, BASELINE_VERSIONS["nic"]),
        ):
            n += 1
            parts.append(COMPONENT.format(n=n, file=file, version=version, model=model))
    (root / "repo" / "Catalog.xml").write_text(CATALOG.format(components="\n".join(parts)))
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/repo/"
    finally:
        server.shutdown()
        server.server_close()


def test_rollout_from_a_repository_catalog(fwlab: FwLab, repository: str, tmp_path: Path) -> None:
    for model in fwlab.data["firmware"]["baseline"].values():
        model.pop("images")
        model["repository"] = {"url": repository, "catalog": "Catalog.xml"}
    fwlab.write(rollout={"max_unavailable": 3, "failure_threshold": 1})
    code, plan = run(["firmware", "plan", "-i", str(fwlab.inventory), "--state-dir", str(tmp_path)])
    assert code == 0, plan
    assert plan["nodes"][0]["components"][1]["source"] == f"repository:{repository}Catalog.xml"
    code, data = apply(fwlab, tmp_path / "state")
    assert code == 0, data
    for name in fwlab.order:
        fw = fwlab.firmware(name)
        assert fw["iDRAC"] == BASELINE_VERSIONS["idrac"] and fw["BIOS"] == BASELINE_VERSIONS["bios"]
        updates = fwlab.updates(name)
        assert sorted(u["component"] for u in updates) == ["BIOS", "NIC", "iDRAC"]  # each once
        assert {u["via"] for u in updates} == {"InstallFromRepository"}
        assert all(u["image"].startswith(repository) for u in updates)
        node = next(n for n in data["nodes"] if n["node"] == name)
        assert [c["result"] for c in node["components"]] == ["updated"] * 3
    code, again = apply(fwlab, tmp_path / "state")
    assert code == 0 and all(n["status"] == "nothing-to-do" for n in again["nodes"])
    assert all(len(fwlab.updates(n)) == 3 for n in fwlab.order)
