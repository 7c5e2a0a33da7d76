"""What the kubernetes and nvidia stages share: validate a rendered bundle, write it whole, say it is not applied.

Both stages apply only in parts (host sides, Helm and labels where a cluster exists, kubeadm init/join behind
their gate; the node-side NVIDIA steps are not built), so each renders its part of ``rackctl render
cluster``, validates it the same way the command does (:func:`bootstrap.cluster.validate.validate_bundle`:
typed kubeadm models, ``kubernetes-validate --strict``, CRD schemas where the CRDs are at hand), writes it by
rename under ``<state-dir>/<dir>`` and returns a :meth:`~bootstrap.stages.base.StageResult.not_applied`
result.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from bootstrap.cluster.render import Bundle, write_bundle
from bootstrap.cluster.validate import validate_bundle
from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem
from bootstrap.inventory.models import Inventory
from bootstrap.stages.base import NodeResult, Rendered, Stage, StageContext, StageResult
from bootstrap.stages.cluster_inputs import cluster_inputs


def require_validators() -> None:
    """Refuse (exit 3) before any node is touched when the schema checkers are not installed."""
    missing = [m for m in ("kubernetes_validate", "jsonschema") if importlib.util.find_spec(m) is None]
    if missing:
        raise EnvironmentMissing(
            f"the kubernetes and nvidia stages validate what they render with {', '.join(missing)}, not installed",
            problems=[
                Problem(m.replace("_", "-"), "not importable", "pip install 'rackctl[cluster]'") for m in missing
            ],
        )


class ClusterRenderStage(Stage):
    """A stage that renders and validates part of the cluster bundle and applies nothing (yet).

    It runs on nodes below its ``requires`` state too (``renders_when_blocked``): rendering needs only the
    inventory, and each such node's reason says why it could not have been applied.
    """

    applies = False
    renders_when_blocked = True

    def check_environment(self, ctx: StageContext) -> None:
        """The schema checkers are installed (exit 3 before any node is touched otherwise)."""
        require_validators()

    def render_checked(self, ctx: StageContext, render: Callable[[Inventory, Path | None], Bundle]) -> Bundle:
        """``render`` the stage's part with the run's ``--charts``, validated (with ``--crds``) or refused."""
        inputs = cluster_inputs(ctx.options.cluster)
        bundle = render(ctx.inventory, inputs.charts)
        validate_or_refuse(ctx.inventory, bundle, self.name, inputs.crds)
        return bundle


def validate_or_refuse(inv: Inventory, bundle: Bundle, stage: str, crd_dir: Path | None = None) -> None:
    """Every problem of ``bundle`` at once (each naming the inventory field), as bad input: nothing written.

    ``crd_dir``: CRD YAML to check custom resources against (``up --crds``, as ``render cluster --crds``).
    """
    problems = validate_bundle(inv, bundle, crd_dir)
    if problems:
        raise InvalidInput(
            f"stage {stage}: what it renders has {len(problems)} problem(s); nothing was written or applied",
            problems=problems,
        )


def checked_by(bundle: Bundle, *extra: str) -> tuple[str, ...]:
    """What checked the bundle's files (the validators recorded per file), plus the stage's own checks."""
    found = sorted({check for f in bundle.files for check in f.checks})
    return (*extra, *found)


def unchecked(bundle: Bundle) -> tuple[str, ...]:
    """What the render could not do or check here, and why (the index's ``not_rendered``)."""
    return tuple(f"{item['what']}: {item['why']}" for item in bundle.not_rendered)


def write_not_applied(
    ctx: StageContext, bundle: Bundle, out: Path, *, why: str, message: str, checks: tuple[str, ...]
) -> StageResult:
    """Write ``bundle`` to ``out`` (whole directory, by rename) and report every node rendered, not applied.

    A node in ``ctx.cannot_apply`` (a predecessor not applied) gets that reason after ``why``.
    """
    write_bundle(bundle, out)
    for note in bundle.corrections:
        ctx.progress.log(f"{ctx.stage}: corrected: {note}")
    rendered = Rendered(out, checks, why, unchecked(bundle))
    per_node = {node: f"{why}; {reason}" for node, reason in ctx.cannot_apply.items()}
    return StageResult.not_applied(ctx.nodes, rendered, message=message, why_per_node=per_node)


def with_host_side(result: StageResult, host: dict[str, NodeResult], playbook: str) -> StageResult:
    """``result`` (rendered, not applied) with what the stage's host side did on each node: the nodes it ran on
    named in the message, a failed node's result in place of its "not applied" one, the others' words appended."""
    ran = [n for n, r in host.items() if r.applied and r.ok]
    if ran:
        result.message += f"; host side applied on {', '.join(ran)} (playbooks/{playbook})"
    for node, res in host.items():
        if not res.ok:
            result.nodes[node] = res
        else:
            result.nodes[node].message = f"{result.nodes[node].message}; {res.message}"
    result.ok = all(r.ok for r in result.nodes.values())
    return result
