"""Grafana dashboards as code: GPUs (DCGM exporter), Triton models and nodes, provisioned by Grafana's sidecar.

The dashboards are the JSON files of ``bootstrap/cluster/data/dashboards/`` (Grafana ``schemaVersion``
pinned in each). :func:`dashboard_objects` wraps each in a ConfigMap labelled ``grafana_dashboard: "1"`` in
the monitoring namespace, the label kube-prometheus-stack's Grafana sidecar watches (its values are set
explicitly in :func:`bootstrap.cluster.charts.kube_prometheus_stack`). The metric names the queries may use
are held here, one list per exporter, and :func:`metric_names` reads them back out of a query.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

from bootstrap.cluster.charts import SIDECAR_DASHBOARD_LABEL as SIDECAR_LABEL
from bootstrap.inventory.models import Inventory

#: Metrics the DCGM exporter publishes by default: the enabled fields of its default counter list,
#: ``etc/dcp-metrics-included.csv`` (NVIDIA/dcgm-exporter, read at commit 084a245). rackctl adds none.
DCGM_DEFAULT_METRICS = frozenset(
    {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)
#: The node label of DCGM exporter releases: ``Hostname`` (its main branch renames it ``hostname``, #655,
#: in no release yet); :mod:`bootstrap.validation.checks` reads the same label.
DCGM_HOST_LABEL = "Hostname"

#: Triton's per-model inference metrics (``/metrics`` on port 8002, labels ``model`` and ``version``): all but
#: the last as registered in triton-inference-server/core ``src/metrics.cc`` (read at commit 00a1eef); the
#: pending-request gauge (``FamilyInferenceQueueSize`` there); all checked against a real tritonserver's
#: ``/metrics`` by tests/stages/test_dashboard_metrics_live.py.
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
    }
)

#: node-exporter metrics (kube-prometheus-stack's ``prometheus-node-exporter``) the nodes dashboard uses.
NODE_EXPORTER_METRICS = frozenset(
    {
        "node_uname_info",
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "node_filesystem_avail_bytes",
        "node_filesystem_size_bytes",
        "node_load1",
    }
)

#: kube-state-metrics (kube-prometheus-stack's, on by default) metrics the Triton dashboard uses: a model's
#: Deployment replicas (docs/metrics/workload/deployment-metrics.md of kubernetes/kube-state-metrics).
KUBE_STATE_METRICS = frozenset({"kube_deployment_status_replicas_available"})

#: Every metric name a dashboard query may name.
KNOWN_METRICS = DCGM_DEFAULT_METRICS | TRITON_METRICS | NODE_EXPORTER_METRICS | KUBE_STATE_METRICS

_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{")
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")


def metric_names(query: str) -> set[str]:
    """The metric names a query selects: every ``name{...}`` selector, and ``label_values(name, label)``."""
    return set(_SELECTOR.findall(query)) | {m for m, _ in _LABEL_VALUES.findall(query)}


def load_dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard, for every JSON file shipped in ``data/dashboards``."""
    folder = resources.files("bootstrap.cluster") / "data" / "dashboards"
    return {
        entry.name: json.loads(entry.read_text(encoding="utf-8"))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".json")
    }


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL query of a dashboard: its panels' targets and its query variables."""
    found = [t["expr"] for p in dashboard.get("panels", []) for t in p.get("targets", []) if "expr" in t]
    found += [v["query"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]
    return found


def dashboard_objects(inv: Inventory) -> list[dict[str, Any]]:
    """The monitoring Namespace and one sidecar-labelled ConfigMap per dashboard; none without Grafana."""
    mon = inv.monitoring
    if not (mon.enabled and mon.grafana):
        return []
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": mon.namespace}}]
    for name, dashboard in load_dashboards().items():
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"grafana-dashboard-{dashboard['uid']}",
                    "namespace": mon.namespace,
                    "labels": {SIDECAR_LABEL[0]: SIDECAR_LABEL[1], "app.kubernetes.io/managed-by": "rackctl"},
                },
                "data": {name: json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"},
            }
        )
    return out
