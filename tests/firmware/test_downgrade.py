"""A baseline below what is installed: the component is left alone, the plan and the rollout say so (the
component, both versions and the flag), and ``--allow-downgrade`` rolls it back (emulated iDRACs)."""

from __future__ import annotations

from pathlib import Path

from fwlab import MIRROR, FwLab
from test_rollout import apply, run


def test_a_downgrade_is_refused_unless_asked_for(fwlab: FwLab, tmp_path: Path) -> None:
    state, node = tmp_path / "state", fwlab.order[3]
    model = fwlab.specs[node].model
    fwlab.write(baseline={model: {"bios": "2.3.0", "images": {"bios": f"{MIRROR}BIOS_{model.upper()}_WN64_2.3.0.EXE"}}})
    code, plan = run(["firmware", "plan", "-i", str(fwlab.inventory), "--state-dir", str(state), "--limit", node])
    assert code == 0, plan
    [bios] = plan["nodes"][0]["components"]
    assert bios["action"] == "above-target" and bios["installed"] == ["2.3.5"] and bios["target"] == "2.3.0"
    [refused] = plan["downgrades_refused"]
    assert all(word in refused for word in (node, "bios", "2.3.5", "2.3.0", "--allow-downgrade")), refused

    code, data = apply(fwlab, state, "--limit", node)
    assert code == 0 and data["nodes"][0]["status"] == "nothing-to-do"
    assert "--allow-downgrade" in data["nodes"][0]["message"] and data["plan"]["downgrades_refused"] == [refused]
    assert fwlab.updates(node) == [] and fwlab.firmware(node)["BIOS"] == "2.3.5"  # nothing flashed

    code, data = apply(fwlab, state, "--limit", node, "--allow-downgrade")
    assert code == 0, data["reason"]
    [done] = data["nodes"]
    assert done["status"] == "done" and [c["result"] for c in done["components"]] == ["updated"]
    assert [u["component"] for u in fwlab.updates(node)] == ["BIOS"] and fwlab.firmware(node)["BIOS"] == "2.3.0"
    code, data = apply(fwlab, state, "--limit", node, "--allow-downgrade")
    assert code == 0 and data["nodes"][0]["status"] == "nothing-to-do"  # exactly at target: done
    assert len(fwlab.updates(node)) == 1
