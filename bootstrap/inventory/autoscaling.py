"""A served model's autoscaling, resolved against the rest of the inventory.

``deployment.autoscaling`` (:class:`~bootstrap.inventory.served_models.AutoscalingSpec`) names the targets;
the bounds and the Prometheus come from elsewhere: ``max_replicas``, when unset, is the number of instances
the ``sizing:`` placement (``rackctl size --write``) gives the model, and Prometheus is kube-prometheus-stack's
in ``monitoring.namespace``. :func:`resolve` does that for the rendering; the rule ``autoscaling``
(:mod:`bootstrap.inventory.rules`) refuses what cannot be resolved, with :func:`sizing_instances`' reasons.

A sizing model (``llama-2-13b`` at ``awq``, names normalised by :func:`~bootstrap.inventory.sizing_spec.
normalise_name`) is the served model named ``llama-2-13b-awq``, or ``llama-2-13b`` when one precision of it
is sized (or the served model's own ``precision`` picks one); anything else is ambiguous and not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from bootstrap.inventory.models import Inventory
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.inventory.sizing_spec import SizingSection, normalise_name

#: Served-model precisions whose sizing name differs from the lower-cased one.
_SIZING_PRECISION = {"INT4_AWQ": "awq"}


@dataclass(frozen=True)
class Scaling:
    """What the ``ScaledObject`` of one model says (bounds resolved, Prometheus found)."""

    min_replicas: int
    max_replicas: int
    #: where ``max_replicas`` came from: the field, or the sizing placement
    max_from: str
    pending_requests_per_replica: float
    queue_duration_us: int | None
    window: str
    scale_down_stabilization_s: int
    prometheus_url: str


@dataclass(frozen=True)
class SizedInstances:
    """The instances a sizing placement gives one served model, or why none can be read."""

    count: int | None
    reason: str


def _sizing_key(spec: ModelSpec, sizing: SizingSection) -> tuple[tuple[str, str] | None, str]:
    """The sizing (model, precision) that is ``spec``, or None and why."""
    name = normalise_name(spec.name)
    sized = sorted({(r.model, r.precision) for r in sizing.requirements.models})
    exact = [key for key in sized if f"{key[0]}-{key[1]}" == name]
    by_model = [key for key in sized if key[0] == name]
    own = _SIZING_PRECISION.get(spec.precision, spec.precision.lower())
    candidates = exact or ([k for k in by_model if k[1] == own] if len(by_model) > 1 else by_model)
    shown = ", ".join(f"{m} {p}" for m, p in sized)
    if not candidates:
        if len(by_model) > 1:
            return None, (
                f"sizing has {spec.name!r} at {', '.join(p for _, p in by_model)} and none at its precision "
                f"{spec.precision}: which one is it is ambiguous"
            )
        return None, f"no sizing model is {spec.name!r} (sizing has {shown}; a served name is <model>-<precision>)"
    return candidates[0], ""


def sizing_instances(inv: Inventory, spec: ModelSpec) -> SizedInstances:
    """How many instances the ``sizing:`` placement (and fleet) runs of ``spec``, or why that is unknown."""
    sizing = inv.sizing
    if sizing is None:
        return SizedInstances(None, "the inventory has no sizing: section (rackctl size --write) to take it from")
    key, reason = _sizing_key(spec, sizing)
    if key is None:
        return SizedInstances(None, reason)
    others = [m.name for m in inv.models if m.name != spec.name and _sizing_key(m, sizing)[0] == key]
    if others:
        return SizedInstances(
            None,
            f"sizing's {key[0]} {key[1]} is {spec.name!r} and also {', '.join(map(repr, others))}: whose "
            "instances they are is ambiguous",
        )
    placements = [p for p in [sizing.placement, *(sizing.fleet or [])] if p is not None]
    if not placements:
        return SizedInstances(None, "the sizing: section has no placement (rackctl size --write stores one)")
    count = sum(
        1
        for placement in placements
        for node in placement.nodes
        for inst in node.instances
        if (inst.model, inst.precision) == key
    )
    if count == 0:
        return SizedInstances(None, f"the sizing placement runs no instance of {key[0]} {key[1]}")
    return SizedInstances(count, f"sizing placement: {count} instance(s) of {key[0]} {key[1]}")


def resolve(inv: Inventory, spec: ModelSpec) -> Scaling | None:
    """The resolved autoscaling of ``spec`` (one of ``inv.models``), None when it sets none.

    Raises ValueError when ``max_replicas`` cannot be resolved: the rule ``autoscaling`` refuses such an
    inventory first, naming the field."""
    auto = spec.deployment.autoscaling
    if auto is None:
        return None
    if auto.max_replicas is not None:
        maximum, source = auto.max_replicas, "deployment.autoscaling.max_replicas"
    else:
        sized = sizing_instances(inv, spec)
        if sized.count is None:
            raise ValueError(f"{spec.name}: deployment.autoscaling.max_replicas is unset and {sized.reason}")
        maximum, source = sized.count, sized.reason
    return Scaling(
        min_replicas=auto.min_replicas,
        max_replicas=maximum,
        max_from=source,
        pending_requests_per_replica=auto.pending_requests_per_replica,
        queue_duration_us=auto.queue_duration_us,
        window=auto.window,
        scale_down_stabilization_s=auto.scale_down_stabilization_s,
        prometheus_url=inv.monitoring.prometheus_url,
    )


def autoscaled(inv: Inventory) -> dict[str, Scaling]:
    """Model name -> its resolved autoscaling, for every model of ``inv`` that sets one."""
    out = {}
    for spec in inv.models:
        scaling = resolve(inv, spec)
        if scaling is not None:
            out[spec.name] = scaling
    return out
