"""Scale smoke: 50 emulated iDRACs start, each answers with its own credentials, and stop leaves nothing."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from rackctl_lab.idrac import EmulatedRack
from rackctl_lab.idrac.rack import is_worker

pytestmark = pytest.mark.lab

MODELS = (
    ("R660", None, 0),
    ("R760xa", "NVIDIA L40S", 4),
    ("XE8640", "NVIDIA H100 80GB HBM3", 4),
    ("XE9680", "NVIDIA H100 80GB HBM3", 8),
)


@pytest.mark.slow
def test_fifty_bmcs_start_answer_independently_and_stop(tmp_path, util):
    specs = [util.make_spec(100 + i, f"node-{i:02d}", *MODELS[i % 4]) for i in range(50)]
    rack = EmulatedRack(specs, tmp_path / "rack")
    endpoints = rack.start(timeout_s=90)
    try:
        assert len(rack.pids) >= 1 and all(is_worker(p) for p in rack.pids)
        assert len({ep.url for ep in endpoints}) == 50

        def check(i: int) -> tuple[str, int, int, int]:
            ep, spec = endpoints[i], specs[i]
            http = requests.Session()
            http.trust_env = False
            http.verify = str(ep.ca_file)
            system = http.get(
                f"{ep.url}/redfish/v1/Systems/System.Embedded.1",
                auth=(spec.username, spec.password),
                timeout=20,
            )
            neighbour = specs[(i + 1) % 50]
            foreign = http.get(
                f"{ep.url}/redfish/v1/Systems/System.Embedded.1",
                auth=(neighbour.username, neighbour.password),
                timeout=20,
            ).status_code
            gpus = http.get(
                f"{ep.url}/redfish/v1/Systems/System.Embedded.1/Processors?$expand=*",
                auth=(spec.username, spec.password),
                timeout=20,
            ).json()["Members"]
            return (
                system.json()["SKU"],
                system.status_code,
                foreign,
                sum(p["ProcessorType"] == "GPU" for p in gpus),
            )

        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(check, range(50)))
        assert [r[0] for r in results] == [s.service_tag for s in specs]
        assert all(r[1] == 200 and r[2] == 401 for r in results)
        assert [r[3] for r in results] == [s.gpu_count for s in specs]
    finally:
        pids = rack.pids
        rack.stop()
    assert not any(is_worker(p) for p in pids)
    host, port = endpoints[0].url.removeprefix("https://").rsplit(":", 1)
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass
