"""A real tritonserver behind a Kubernetes Service of the real kube-apiserver, for the smoke tests.

The tritonserver is the nvidia-pytriton wheel's (``bootstrap.triton.server``), serving a rendered streaming
in-flight-batcher repository with the GPU-only ``tensorrt_llm`` replaced by its stand-in
(``bootstrap.triton.loadcheck.standin_repository``). It listens on a non-loopback address of this host: the API
server refuses an Endpoints address in 127.0.0.0/8 ("may not be in the loopback range"), and its service
proxy only goes to an address whose ``targetRef`` Pod reports that IP.

No kubelet, scheduler, Deployment or endpoints controller runs (tests/cluster/apiserver.py). What they would
do for a Triton pod, :class:`ServingStandIn` does through the API and says so: the pod bound and Running with
this host's address as its IP (scheduler + kubelet), the Service's Endpoints listing it (endpoints controller),
the Deployment's status rolled out (Deployment controller + kubelet).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.loadcheck import build_test_tokenizer, standin_repository
from bootstrap.triton.render import render_all
from bootstrap.triton.server import TritonServer
from tests.kube_objects import MERGE, DeploymentReadier, KubeObjects


def host_address() -> str | None:
    """The first global IPv4 address of this host's interfaces (not loopback, not link-local), or None."""
    try:
        done = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    for link in json.loads(done.stdout):
        for addr in link.get("addr_info", []):
            if addr.get("scope") == "global" and not str(addr.get("local", "")).startswith(("127.", "169.254.")):
                return str(addr["local"])
    return None


@contextmanager
def serving_triton(address: str) -> Iterator[TritonServer]:
    """tritonserver on ``address`` serving a streaming in-flight-batcher stand-in repository (``ensemble``,
    ``tensorrt_llm_bls``, ...); stopped and removed afterwards."""
    spec = ModelSpec.model_validate(
        {
            "name": "served",
            "trtllm_version": "0.14.0",
            "hf_model_dir": "/models/hf/served",
            "engine_dir": "/models/engines/served",
            "streaming": True,
            "max_batch_size": 16,
        }
    )
    with tempfile.TemporaryDirectory(prefix="rackctl-serving-") as tmp:
        work = Path(tmp)
        render_all([spec], work / "out")
        repo = standin_repository(work / "out" / spec.name, work / "work", build_test_tokenizer(work / "tok"))
        with TritonServer(repo, address=address) as server:
            yield server


class ServingStandIn(DeploymentReadier):
    """Stands in for the scheduler, the kubelet, the endpoints controller and the Deployment controller while a
    stage runs: as soon as the Deployment ``name`` of ``namespace`` exists, a Pod bound to a node and Running
    with IP ``address``, the Endpoints of the Service of the same name listing it on port ``http`` =
    ``port``, then the Deployment marked rolled out.

    ``endpoints=False``: the Endpoints object is written without addresses, as the endpoints controller
    writes it for a Service no ready pod backs."""

    thread_name = "serving-stand-in"

    def __init__(
        self,
        kube: KubeObjects,
        namespace: str,
        names: list[str],
        *,
        address: str,
        port: int,
        endpoints: bool = True,
        poll_s: float = 0.2,
    ) -> None:
        super().__init__(kube, namespace, names, poll_s=poll_s)
        self.address, self.port, self.endpoints = address, port, endpoints

    @property
    def served(self) -> list[str]:
        """The Deployments served and rolled out, in order."""
        return self.readied

    def roll_out(self, name: str) -> None:
        serve(self.kube, self.namespace, name, self.address, self.port, endpoints=self.endpoints)
        super().roll_out(name)


def serve(kube: KubeObjects, namespace: str, service: str, address: str, port: int, *, endpoints: bool = True) -> None:
    """Pod ``<service>-0`` Running with IP ``address`` (as the scheduler and kubelet would make it) and the
    Endpoints and an EndpointSlice of ``service`` listing it on port ``http`` = ``port`` (as the endpoints and
    EndpointSlice controllers would), or no
    address at all when ``endpoints`` is false. Idempotent: a pod or Endpoints already there is kept or updated
    (a second stand-in over the same namespace, as for a later ``up``)."""
    pod = f"{service}-0"
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "labels": {"app.kubernetes.io/name": "triton"}},
        "spec": {"nodeName": "gpu-node", "containers": [{"name": "triton", "image": "tritonserver"}]},
    }
    if kube.server.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}").status_code == 404:
        kube.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "phase": "Running",
        "podIP": address,
        "podIPs": [{"ip": address}],
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
    }
    kube.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}/status", {"status": status}, headers=MERGE)
    subsets = [
        {
            "addresses": [{"ip": address, "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        }
    ]
    endpoints_obj = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": service},
        "subsets": subsets if endpoints else [],
    }
    path = f"/api/v1/namespaces/{namespace}/endpoints"
    if kube.server.request("GET", f"{path}/{service}").status_code == 404:
        kube.call("POST", path, endpoints_obj)
    else:  # a second stand-in (a later `up`) over the same namespace: the endpoints controller's update
        kube.call("PATCH", f"{path}/{service}", {"subsets": endpoints_obj["subsets"]}, headers=MERGE)
    # The API server's service proxy resolves a Service through its EndpointSlices (1.37), as the
    # EndpointSlice controller would write them.
    ready = [
        {"addresses": [address], "conditions": {"ready": True}, "targetRef": subsets[0]["addresses"][0]["targetRef"]}
    ]
    slice_obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-standin",
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": ready if endpoints else [],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    if kube.server.request("GET", f"{slices}/{service}-standin").status_code == 404:
        kube.call("POST", slices, slice_obj)
    else:
        kube.call("PATCH", f"{slices}/{service}-standin", {"endpoints": slice_obj["endpoints"]}, headers=MERGE)
