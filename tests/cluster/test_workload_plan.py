"""Which workload Jobs ``validate-cluster`` plans for an inventory (no cluster needed): the product label per
MIG strategy and time-slicing, tolerations from the inventory's taints, names, and ``--plan`` on the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.inventory.loader import load_inventory
from bootstrap.validation import workloads as wc


def _node(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["hostname"] == name)


def _targets(path: Path, *, nccl: bool = False) -> dict[tuple[str, str], wc.Target]:
    the_plan = wc.plan(load_inventory(path), wc.Settings(nccl=nccl), run_id="abc123")
    return {(t.check, t.subject): t for t, _ in the_plan.jobs}


def test_smoke_per_product_and_nccl_per_sxm_node(write_inventory: Callable[..., Path]) -> None:
    targets = _targets(write_inventory(), nccl=True)
    assert set(targets) == {
        ("cuda-smoke", "NVIDIA-L40S"),
        ("cuda-smoke", "NVIDIA-H100-80GB-HBM3"),
        ("nccl-allreduce", "gpu-xe9680-01"),
    }
    nccl = targets["nccl-allreduce", "gpu-xe9680-01"]
    assert (nccl.selector, nccl.resource, nccl.count) == (
        (("kubernetes.io/hostname", "gpu-xe9680-01"),),
        "nvidia.com/gpu",
        8,
    )


def test_product_label_follows_mig_strategy_and_time_slicing(write_inventory: Callable[..., Path]) -> None:
    def single(data: dict[str, Any]) -> None:
        data["nvidia"] = {
            "profiles": {
                "XE9680": {"mig_strategy": "single", "mig_config": "all-1g.10gb"},
                "R760xa": {"time_slicing_replicas": 4},
            }
        }

    targets = _targets(write_inventory(single), nccl=True)
    smoke = {subject: t for (check, subject), t in targets.items() if check == "cuda-smoke"}
    assert set(smoke) == {"NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "NVIDIA-L40S-SHARED"}
    assert smoke["NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"].resource == "nvidia.com/gpu"
    assert ("nccl-allreduce", "gpu-xe9680-01") not in targets  # MIG slices have no NVLink between them
    skipped = wc.plan(load_inventory(write_inventory(single)), wc.Settings(nccl=True)).skipped
    assert skipped == [
        {"check": "nccl-allreduce", "node": "gpu-xe9680-01", "why": "its GPUs are MIG-partitioned: no NVLink"}
    ]

    def mixed(data: dict[str, Any]) -> None:
        data["nvidia"] = {"profiles": {"XE9680": {"mig_strategy": "mixed", "mig_config": "all-balanced"}}}

    smoke = {s: t for (c, s), t in _targets(write_inventory(mixed)).items() if c == "cuda-smoke"}
    mig = smoke["NVIDIA-H100-80GB-HBM3/mig-1g.10gb"]
    assert (mig.selector, mig.resource) == (
        (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),),
        "nvidia.com/mig-1g.10gb",
    )

    def half_mixed(data: dict[str, Any]) -> None:  # a second XE9680 with whole GPUs: the same product twice
        mixed(data)
        twin = {**_node(data, "gpu-xe9680-01"), "hostname": "gpu-xe9680-02", "service_tag": "GX02X96"}
        twin["bmc"] = {**twin["bmc"], "address": "10.10.0.16"}
        twin["interfaces"] = [{**i, "ip": i["ip"][:-2] + "26"} for i in twin["interfaces"]]
        twin["mig_profile"] = "all-disabled"
        data["nodes"].append(twin)

    the_plan = wc.plan(load_inventory(write_inventory(half_mixed)), wc.Settings(), run_id="abc123")
    names = {t.subject: job["metadata"]["name"] for t, job in the_plan.jobs}
    assert set(names) == {"NVIDIA-L40S", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3/mig-1g.10gb"}
    assert len(set(names.values())) == 3  # one Job each, none overwriting another


def test_jobs_tolerate_the_inventory_taints_and_have_dns_names(write_inventory: Callable[..., Path]) -> None:
    def taint(data: dict[str, Any]) -> None:
        _node(data, "gpu-xe9680-01")["taints"] = [
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "pool", "value": "h100", "effect": "NoExecute"},
        ]

    inv = load_inventory(write_inventory(taint))
    jobs = {t.subject: job for t, job in wc.plan(inv, wc.Settings(nccl=True, timeout_s=90.5), run_id="abc123").jobs}
    h100 = jobs["NVIDIA-H100-80GB-HBM3"]["spec"]
    assert h100["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "pool", "operator": "Equal", "value": "h100", "effect": "NoExecute"},
    ]
    assert h100["activeDeadlineSeconds"] == 91
    assert "tolerations" not in jobs["NVIDIA-L40S"]["spec"]["template"]["spec"]
    long = wc.Target("cuda-smoke", "X" * 80, (), "nvidia.com/gpu", 1, ())
    name = wc.job_name(long, "abc123")
    assert len(name) <= 63 and name.endswith("-abc123") and name.startswith("rackctl-cuda-smoke-xxx")


def test_plan_needs_no_cluster_and_refuses_skip_workloads(write_inventory: Callable[..., Path]) -> None:
    path = str(write_inventory())
    result = CliRunner().invoke(cli, ["validate-cluster", "-i", path, "--plan"])
    assert result.exit_code == 0
    assert "would create 2 Job(s) in namespace rackctl-validate" in result.output
    assert "nothing created" in result.output and "nvidia.com/gpu.product: NVIDIA-L40S" in result.output
    result = CliRunner().invoke(cli, ["validate-cluster", "-i", path, "--plan", "--skip-workloads", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.output)["errors"][0]["path"] == "--plan"


def test_a_bad_namespace_is_refused_naming_the_option(write_inventory: Callable[..., Path]) -> None:
    args = ["validate-cluster", "-i", str(write_inventory()), "--plan", "--namespace", "Bad_NS", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (error,) = json.loads(result.output)["errors"]
    assert (error["path"], error["message"]) == ("--namespace", "got 'Bad_NS'")
    assert "DNS label" in error["fix"]
