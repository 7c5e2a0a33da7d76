"""What the triton stage applies to roll a model back (``rollback_objects``): the rendered objects, and the
live ones as the API server returns them (the rollback itself runs against the real cluster in
tests/ansible/test_kubernetes_cluster_real.py)."""

from __future__ import annotations

import copy
from typing import Any

from bootstrap.stages.triton.deploy import rollback_objects

DEPLOYMENT = "Deployment/triton/triton-tiny"
REPOSITORY = "ConfigMap/triton/tiny-repository"
LAUNCHER = "ConfigMap/triton/tiny-launcher"


def _template(weights: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "tiny"}, "annotations": {"rackctl.io/weights-version": weights}},
        "spec": {"containers": [{"name": "triton", "image": "triton:26.07"}]},
    }


def _rendered(weights: str, repository: str) -> list[dict[str, Any]]:
    """The model's objects as rackctl renders them."""
    meta = {"namespace": "triton", "labels": {"app": "tiny"}}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "triton"}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**meta, "name": "tiny-repository"},
            "data": {"m": repository},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": "tiny-launcher"}, "data": {"l": "same"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "name": "triton-tiny"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "tiny"}}, "template": _template(weights)},
        },
    ]


def _live(weights: str, repository: str) -> dict[str, dict[str, Any]]:
    """The same objects read back from the server: defaults, server fields and status added."""
    live = {}
    for obj in _rendered(weights, repository)[1:]:
        read = copy.deepcopy(obj)
        read["metadata"] |= {"resourceVersion": "7", "uid": "u", "managedFields": [{"manager": "rackctl"}]}
        if obj["kind"] == "Deployment":
            read["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
            read["status"] = {"readyReplicas": 1}
        live[f"{obj['kind']}/triton/{obj['metadata']['name']}"] = read
    return live


def test_the_rendered_objects_go_back_with_the_template_and_repository_that_served() -> None:
    before, after = _live("aaaaaaaaaaaa", "old"), _live("bbbbbbbbbbbb", "new")
    rendered = _rendered("bbbbbbbbbbbb", "new")
    objects = rollback_objects(rendered, before, after)
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment"]  # the launcher did not change
    config_map, deployment = objects
    assert config_map == {**rendered[1], "data": {"m": "old"}}
    # the whole rendered Deployment (a server-side apply of less would give up the selector rackctl owns) with
    # the template as the server held it before: what `kubectl rollout undo` puts back
    assert deployment == {
        **rendered[3],
        "spec": {**rendered[3]["spec"], "template": before[DEPLOYMENT]["spec"]["template"]},
    }
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "tiny"}}
    assert "status" not in deployment and "resourceVersion" not in deployment["metadata"]


def test_nothing_to_roll_back_to_without_a_deployment_before_or_with_the_same_template() -> None:
    rendered, after = _rendered("bbbbbbbbbbbb", "new"), _live("bbbbbbbbbbbb", "new")
    assert rollback_objects(rendered, {}, after) == []
    first = {k: v for k, v in _live("aaaaaaaaaaaa", "old").items() if k != DEPLOYMENT}
    assert rollback_objects(rendered, first, after) == []
    same = copy.deepcopy(after)
    same[REPOSITORY]["data"] = {"m": "other"}  # the template, not the data, says whether the rollout changed
    assert rollback_objects(rendered, same, after) == []
    assert rollback_objects(rendered[:3], _live("aaaaaaaaaaaa", "old"), after) == []  # no Deployment rendered
