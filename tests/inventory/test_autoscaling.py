"""``models[].deployment.autoscaling``: its own fields (the cross-field checks are rule ``autoscaling``,
tests/inventory/test_rules.py)."""

from __future__ import annotations

from typing import Any

from tests.inventory.conftest import expect, problems_of, valid


def _autoscale(data: dict[str, Any], index: int = 0, **fields: Any) -> dict[str, Any]:
    data["models"][index]["deployment"]["autoscaling"] = fields
    return data


def test_min_replicas_zero_is_refused_naming_the_field_the_value_and_the_fix(data: dict[str, Any]) -> None:
    _autoscale(data, min_replicas=0, max_replicas=2)
    expect(data, "models[0].deployment.autoscaling.min_replicas", "min_replicas 0", "no pod", "1 or more")


def test_max_replicas_below_min_is_refused(data: dict[str, Any]) -> None:
    _autoscale(data, min_replicas=3, max_replicas=2)
    expect(data, "models[0].deployment.autoscaling", "max_replicas 2 is below min_replicas 3", "3 or more")


def test_fixed_replicas_beside_autoscaling_are_refused_not_ignored(data: dict[str, Any]) -> None:
    _autoscale(data, max_replicas=2)
    data["models"][0]["deployment"]["replicas"] = 3
    expect(data, "models[0].deployment", "replicas 3 would not be used", "autoscaling.min_replicas")


def test_targets_and_window_are_checked(data: dict[str, Any]) -> None:
    _autoscale(data, max_replicas=2, pending_requests_per_replica=0)
    expect(data, "models[0].deployment.autoscaling.pending_requests_per_replica", "greater than 0")
    _autoscale(data, max_replicas=2, window="5 minutes")
    expect(data, "models[0].deployment.autoscaling.window", "5 minutes")
    _autoscale(data, max_replicas=2, scale_down_stabilization_s=7200)
    expect(data, "models[0].deployment.autoscaling.scale_down_stabilization_s", "7200")


def test_defaults_and_a_model_without_autoscaling(data: dict[str, Any]) -> None:
    _autoscale(data, max_replicas=4)
    inv = valid(data).inventory
    auto = inv.models[0].deployment.autoscaling
    assert auto is not None
    assert (auto.min_replicas, auto.max_replicas, auto.pending_requests_per_replica) == (1, 4, 8)
    assert (auto.queue_duration_us, auto.window, auto.scale_down_stabilization_s) == (None, "1m", 300)
    assert inv.models[1].deployment.autoscaling is None
    assert problems_of(data) == []
