"""A small emulated iDRAC rack shared by the lab tests (real sushy-tools, real TLS, real processes)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
import requests

from rackctl_lab.idrac import BmcEndpoint, EmulatedBmcSpec, EmulatedRack
from tests import timing

H100 = "NVIDIA H100 80GB HBM3"

#: name -> (model, gpu model, gpu count); each test takes its own BMC so tests do not share state.
NODES = {
    "head-01": ("R660", None, 0),
    "gpu-l40s": ("R760xa", "NVIDIA L40S", 2),
    "gpu-xe8640": ("XE8640", H100, 4),
    "gpu-xe9680": ("XE9680", H100, 8),
    "bios-a": ("R760xa", "NVIDIA L40S", 4),
    "bios-b": ("R660", None, 0),
    "bios-c": ("R660", None, 0),
    "power-a": ("R660", None, 0),
    "boot-a": ("R660", None, 0),
    "scp-a": ("XE9680", H100, 8),
    "fw-a": ("R660", None, 0),
    "fw-b": ("R660", None, 0),
    "vm-a": ("R660", None, 0),
    "sess-a": ("R660", None, 0),
    "sess-b": ("R660", None, 0),
    "fault-a": ("R660", None, 0),
    "fault-b": ("R660", None, 0),
    "fault-c": ("R660", None, 0),
    "fault-d": ("R660", None, 0),
    "fault-e": ("R660", None, 0),
    "fault-f": ("R660", None, 0),
}


def make_spec(index: int, name: str, model: str, gpu: str | None, count: int) -> EmulatedBmcSpec:
    return EmulatedBmcSpec(
        name=name,
        model=model,
        service_tag=f"LAB{index:04d}",
        gpu_model=gpu,
        gpu_count=count,
        nics={
            "NIC.Embedded.1-1-1": f"52:54:00:aa:00:{index:02x}",
            "NIC.Integrated.1-1-1": f"52:54:00:aa:01:{index:02x}",
        },
        username="root",
        password=f"s3cret-{name}-{index}",
        power_delay_s=0.2,
        job_seconds=1.5 if name == "scp-a" else 0.4,
    )


SPECS = [make_spec(i, name, *hw) for i, (name, hw) in enumerate(NODES.items())]


@pytest.fixture(scope="package")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedRack]:
    rack = EmulatedRack(SPECS, tmp_path_factory.mktemp("rack"), processes=2)
    rack.start()
    try:
        yield rack
    finally:
        rack.stop()


@pytest.fixture(scope="package")
def endpoints(rack: EmulatedRack) -> dict[str, BmcEndpoint]:
    return {ep.name: ep for ep in rack.endpoints}


@pytest.fixture(scope="package")
def specs() -> dict[str, EmulatedBmcSpec]:
    return {s.name: s for s in SPECS}


class Bmc:
    """A plain ``requests`` client for one emulated iDRAC (CA-verified, explicit timeouts)."""

    def __init__(self, ep: BmcEndpoint, spec: EmulatedBmcSpec) -> None:
        self.ep, self.spec = ep, spec
        self.http = requests.Session()
        self.http.trust_env = False  # REQUESTS_CA_BUNDLE would override verify=
        self.http.verify = str(ep.ca_file)
        self.token: str | None = None
        self.location: str | None = None

    def login(self) -> requests.Response:
        resp = self.post(
            f"{self.ep.url}/redfish/v1/SessionService/Sessions",
            {"UserName": self.spec.username, "Password": self.spec.password},
            auth=False,
        )
        if resp.status_code == 201:
            self.token, self.location = resp.headers["X-Auth-Token"], resp.headers["Location"]
        return resp

    def logout(self) -> None:
        if self.location:
            self.request("DELETE", self.location)
            self.token = self.location = None

    def request(self, method: str, path: str, body: object = None, auth: bool = True, **kw) -> requests.Response:
        url = path if path.startswith("https://") else f"{self.ep.url}{path}"
        headers = {"X-Auth-Token": self.token} if (auth and self.token) else {}
        basic = None if (not auth or self.token) else (self.spec.username, self.spec.password)
        kw.setdefault("timeout", 10)
        return self.http.request(method, url, json=body, headers=headers, auth=basic, **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: object = None, **kw) -> requests.Response:
        return self.request("POST", path, body, **kw)

    def patch(self, path: str, body: object, **kw) -> requests.Response:
        return self.request("PATCH", path, body, **kw)

    def json(self, path: str) -> dict:
        resp = self.get(path)
        assert resp.status_code == 200, (path, resp.status_code, resp.text)
        return resp.json()


@pytest.fixture
def bmc(endpoints: dict[str, BmcEndpoint], specs: dict[str, EmulatedBmcSpec]) -> Callable[[str], Bmc]:
    made: list[Bmc] = []

    def factory(name: str) -> Bmc:
        client = Bmc(endpoints[name], specs[name])
        made.append(client)
        return client

    yield factory
    for client in made:
        with contextlib.suppress(requests.RequestException):
            client.logout()


def wait_for(predicate: Callable[[], object], timeout: float = timing.QUICK_S, interval: float = 0.1) -> object:
    """Poll until ``predicate()`` is truthy (within ``timeout`` x the time factor: tests/timing.py)."""
    return timing.wait_for(predicate, timeout=timeout, interval=interval)


def extended_ids(resp: requests.Response) -> list[str]:
    """MessageIds of a Redfish error answer."""
    return [m.get("MessageId", "") for m in resp.json()["error"]["@Message.ExtendedInfo"]]


@pytest.fixture(scope="session")
def util() -> SimpleNamespace:
    """Helpers for the test modules (importlib import mode: conftest is not importable)."""
    return SimpleNamespace(wait_for=wait_for, extended_ids=extended_ids, make_spec=make_spec, Bmc=Bmc)
