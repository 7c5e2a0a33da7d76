"""The reconcile plan: an edited inventory against the recorded snapshot, section by section (pure)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bootstrap.day2.reconcile import classify
from bootstrap.day2.snapshot import inventory_snapshot
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.journal.states import NodeState

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


def load(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Inventory:
    data = yaml.safe_load(EXAMPLE.read_text())
    if edit is not None:
        edit(data)
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(path)


def applied(inventory: Inventory) -> dict[str, dict[str, Any]]:
    return {n: {"run": 1, "removed": False, "sections": s} for n, s in inventory_snapshot(inventory).items()}


def node(data: dict[str, Any], hostname: str) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["hostname"] == hostname)


def plan_for(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    before = load(tmp_path)
    after = load(tmp_path, edit)
    states = dict.fromkeys(applied(before), NodeState.CONFIGURED)
    plan = classify(inventory_snapshot(after), applied(before), states)
    return {c.node: c for c in plan.changes}


def test_nothing_edited_is_all_unchanged_and_nothing_is_contacted(tmp_path: Path) -> None:
    inventory = load(tmp_path)
    plan = classify(inventory_snapshot(inventory), applied(inventory), {})
    assert {c.kind for c in plan.changes} == {"unchanged"}
    assert plan.contacted == []


def test_a_bios_profile_edit_reaches_exactly_the_nodes_using_it(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["bios_profiles"] = {"gpu-worker": {"BootMode": "Uefi", "SysProfile": "PerfOptimized"}}

    changes = plan_for(tmp_path, edit)
    changed = {n: c for n, c in changes.items() if c.kind == "changed"}
    assert sorted(changed) == ["gpu-l40s-01", "gpu-xe9680-01"]
    assert all(c.sections == ["bios"] and c.stages == ["bios"] for c in changed.values())
    assert {c.kind for n, c in changes.items() if n not in changed} == {"unchanged"}


def test_each_field_maps_to_its_stage(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        node(data, "cp-02")["labels"] = {"rack": "r2"}  # kubernetes
        node(data, "cp-03")["interfaces"][0]["mtu"] = 9000  # network
        node(data, "gpu-l40s-01")["bmc"]["address"] = "10.10.0.99"  # reach and re-read its BMC
        node(data, "gpu-xe9680-01")["root_disk_hint"] = "/dev/nvme1n1"  # a reinstall: redeploy only

    changes = plan_for(tmp_path, edit)
    assert (changes["cp-02"].sections, changes["cp-02"].stages) == (["kubernetes"], ["kubernetes"])
    assert (changes["cp-03"].sections, changes["cp-03"].stages) == (["interfaces"], ["network"])
    assert changes["gpu-l40s-01"].stages == ["preflight", "discover"]
    xe = changes["gpu-xe9680-01"]
    assert xe.kind == "changed" and xe.stages == [] and xe.deferred == {"os": "rackctl redeploy gpu-xe9680-01"}
    assert xe.diff["os"]["inventory"]["root_disk_hint"] == "/dev/nvme1n1"
    assert changes["head-01"].kind == "unchanged"


def test_a_network_edit_reaches_the_nodes_on_that_network(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["networks"]["storage"]["mtu"] = 1500  # was 9000

    changes = plan_for(tmp_path, edit)
    inventory = load(tmp_path)
    on_storage = {n.hostname for n in inventory.nodes if any(i.network == "storage" for i in n.interfaces)}
    assert {n for n, c in changes.items() if c.kind == "changed"} == on_storage
    assert all(changes[n].stages == ["network"] for n in on_storage)


def test_a_firmware_baseline_edit_is_deferred_to_the_firmware_rollout(tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data.setdefault("firmware", {}).setdefault("baseline", {})["XE9680"] = {"bios": "9.9.9"}

    changes = plan_for(tmp_path, edit)
    xe = changes["gpu-xe9680-01"]
    assert xe.sections == ["firmware"] and xe.stages == []
    assert xe.deferred == {"firmware": "rackctl firmware apply --limit gpu-xe9680-01"}
    assert [n for n, c in changes.items() if c.kind == "changed"] == ["gpu-xe9680-01"]


def test_new_removed_and_adopted(tmp_path: Path) -> None:
    inventory = load(tmp_path)
    desired = inventory_snapshot(inventory)
    record = applied(inventory)
    gone = record.pop("gpu-xe9680-01")
    record["old-01"] = {**gone, "removed": False}
    record["old-02"] = {**gone, "removed": True}  # removed by an earlier apply: not removed again
    states = {"cp-02": NodeState.PROVISIONED, "gpu-xe9680-01": NodeState.REGISTERED, "old-03": NodeState.READY}
    del record["cp-02"]  # known to the journal from `up`, never recorded by apply
    kinds = {c.node: c.kind for c in classify(desired, record, states).changes}
    assert kinds["gpu-xe9680-01"] == "new"  # registered only: never got anywhere
    assert kinds["cp-02"] == "adopted"
    assert kinds["old-01"] == "removed"
    assert "old-02" not in kinds
    assert kinds["old-03"] == "forgotten"  # from `up`, never applied: reported, not contacted


def test_the_snapshot_holds_no_secret_and_passes_the_journal_guard(tmp_path: Path) -> None:
    from bootstrap.journal.secrets import find_secrets

    snapshot = inventory_snapshot(load(tmp_path))
    assert find_secrets(snapshot) == []
    assert snapshot["head-01"]["bmc"]["login"]  # the credential's name, not its value
