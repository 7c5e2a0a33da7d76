"""``rackctl driver upgrade``: the version checks, the plan per path, and what it renders (nothing applied)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.day2.driver import check_version, plan_upgrade, render
from bootstrap.environment import HostEnvironment
from bootstrap.errors import EXIT_NOT_APPLIED, InvalidInput
from bootstrap.inventory import Inventory, load_inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"


def write(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    if edit is not None:
        edit(data)
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def host_path(data: dict[str, Any]) -> None:
    data["cluster"]["gpu_driver"] = "host"


def dvd_2024(data: dict[str, Any]) -> None:
    data["cluster"]["software_profile"] = "dell-dvd-2024"
    data.pop("models", None)


def load(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Inventory:
    return load_inventory(write(tmp_path, edit))


def test_a_driver_below_tritons_cuda_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_version(load(tmp_path), "570.195.03")
    problem = refused.value.problems[0]
    assert problem.path == "--version" and "Triton 25.12" in problem.message and "580.95" in problem.fix


def test_a_branch_the_operator_line_does_not_support_is_refused_with_the_lines_that_do(tmp_path: Path) -> None:
    inventory = load(tmp_path, dvd_2024)  # GPU Operator v22.9, Triton 24.02
    with pytest.raises(InvalidInput) as refused:
        check_version(inventory, "535.161.08")
    problem = refused.value.problems[0]
    assert "not supported by GPU Operator v22.9" in problem.message
    assert "v23.9" in problem.fix
    checks, warnings = check_version(inventory, "525.85.12")
    assert [c["check"] for c in checks] == ["triton", "gpu-operator"] and warnings == []


def operator_v25_10(data: dict[str, Any]) -> None:
    """GPU Operator v25.10.0, a line the driver matrix names (the default v26.7 is not in it yet)."""
    data["cluster"]["versions"] = {"gpu_operator": "v25.10.0"}


def test_a_version_the_matrix_does_not_name_passes_with_a_warning(tmp_path: Path) -> None:
    checks, warnings = check_version(load(tmp_path, operator_v25_10), "580.95.99")
    assert len(checks) == 2 and "580.95.99" in warnings[0]


def test_an_operator_line_the_matrix_does_not_name_is_a_warning_not_a_refusal(tmp_path: Path) -> None:
    """The default v26.7.0: its driver support is not checked, and the warning says so naming the field."""
    checks, warnings = check_version(load(tmp_path), "580.95.05")
    assert [c["check"] for c in checks] == ["triton"]
    assert warnings[0].startswith("cluster.versions.gpu_operator: GPU Operator v26.7.0 (line v26.7) is not in")


@pytest.mark.parametrize("bad", ["latest", "580", "580.95.05; rm -rf /", ""])
def test_a_malformed_version_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_version(load(tmp_path), bad)
    assert refused.value.problems[0].path == "--version"


def test_the_host_path_plans_fabric_manager_only_where_nvswitches_are(tmp_path: Path) -> None:
    plan = plan_upgrade(load(tmp_path, host_path), "580.95.05")
    assert plan.path == "host"
    assert plan.batches == [["gpu-l40s-01"], ["gpu-xe9680-01"]]  # firmware.rollout.max_unavailable: 1
    assert any("nvidia-fabricmanager-580 at exactly 580.95.05" in s for s in plan.steps["gpu-xe9680-01"])
    assert not any("fabricmanager" in s for s in plan.steps["gpu-l40s-01"])
    assert plan.steps["gpu-l40s-01"][0].startswith("cordon and drain") and plan.steps["gpu-l40s-01"][-1] == "uncordon"
    assert plan_upgrade(load(tmp_path, host_path), "580.95.05", max_unavailable=2).batches == [
        ["gpu-l40s-01", "gpu-xe9680-01"]
    ]


def test_the_rendered_playbook_run_passes_ansibles_syntax_check(tmp_path: Path) -> None:
    inventory = load(tmp_path, host_path)
    plan = plan_upgrade(inventory, "580.95.05")
    rendered = render(inventory, plan, tmp_path / "state", HostEnvironment())
    extravars = yaml.safe_load(Path(rendered["extravars"]).read_text())
    assert extravars["nvidia_driver_upgrade_version"] == "580.95.05"
    hosts = yaml.safe_load(Path(rendered["inventory"]).read_text())
    assert set(hosts["all"]["children"]["gpu"]["hosts"]) == {"gpu-l40s-01", "gpu-xe9680-01"}
    playbook_bin = Path(sys.executable).with_name("ansible-playbook")
    check = subprocess.run(
        [
            str(playbook_bin),
            "--syntax-check",
            "-i",
            rendered["inventory"],
            "-e",
            f"@{rendered['extravars']}",
            str(ROOT / rendered["playbook"]),
        ],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_command_says_planned_and_rendered_not_applied(tmp_path: Path) -> None:
    inventory = write(tmp_path)  # the operator path (the host path executes: tests/day2/test_driver_host.py)
    state = tmp_path / "state"
    result = CliRunner().invoke(
        cli,
        [
            "driver",
            "upgrade",
            "--version",
            "580.95.05",
            "--plan",
            "-i",
            str(inventory),
            "--state-dir",
            str(state),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "planned, not applied" and data["applied"] is False and data["exit_code"] == 0
    assert not (state / "day2").exists()  # --plan renders nothing
    result = CliRunner().invoke(
        cli, ["driver", "upgrade", "--version", "580.95.05", "-i", str(inventory), "--state-dir", str(state), "--json"]
    )
    assert result.exit_code == EXIT_NOT_APPLIED, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "planned/rendered, not applied" and data["applied"] is False
    assert data["exit_code"] == EXIT_NOT_APPLIED and "Kubernetes" in data["reason"]
    assert Path(data["plan"]["rendered"]["values"]).is_file()
    result = CliRunner().invoke(
        cli, ["driver", "upgrade", "--version", "580.95.05", "--max-unavailable", "0%", "-i", str(inventory), "--json"]
    )
    assert result.exit_code == 2 and json.loads(result.stdout)["errors"][0]["path"] == "--max-unavailable"


def test_the_human_output_says_not_applied_and_why_with_exit_5(tmp_path: Path) -> None:
    inventory = write(tmp_path)
    state = tmp_path / "state"
    result = CliRunner().invoke(
        cli, ["driver", "upgrade", "--version", "580.95.05", "-i", str(inventory), "--state-dir", str(state)]
    )
    assert result.exit_code == EXIT_NOT_APPLIED, result.output
    text = " ".join(result.output.split())
    assert "planned/rendered, not applied (applied: false)" in text
    assert "needs GPUs and a Kubernetes cluster" in text and "nothing applied" in text
    assert "Traceback" not in result.output
    assert (state / "day2" / "driver-580.95.05" / "gpu-operator-values.yml").is_file()
