"""The driver facts ``rackctl driver upgrade`` and the inventory rules check against, one test per fact that was
wrong before it was checked against NVIDIA's pages (sources in ``bootstrap/day2/driver_matrix.py`` and
``bootstrap/inventory/profiles.py``). Each drives the real check: ``check_version`` on a loaded inventory, or
the inventory rules through ``validate_data``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.cluster.gpu_operator import driver_version
from bootstrap.day2.driver import check_version
from bootstrap.errors import InvalidInput
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.inventory.cluster import GpuProfile
from tests.inventory.conftest import expect, valid

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"

#: Triton releases with the TensorRT-LLM release that matches each (the inventory rules insist on the pair).
TRTLLM_OF = {"23.10": "0.5.0", "24.02": "0.8.0", "24.10": "0.14.0", "25.12": "1.1.0", "26.07": "26.07"}


def stack(tmp_path: Path, *, triton: str = "24.02", **versions: str) -> Inventory:
    """The example inventory with its software versions overridden."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["cluster"]["versions"] = {"triton": triton, "trtllm": TRTLLM_OF[triton], **versions}
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(path)


@pytest.fixture
def data(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The example inventory as data (with its password variable set), for the inventory rules."""
    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "not-used-here")
    return dict(yaml.safe_load(EXAMPLE.read_text()))


def versions_of(data: dict[str, Any], *, triton: str, **versions: str) -> dict[str, Any]:
    # elsewhere a TensorRT-LLM release rackctl's table does not hold: only a warning, no pairing to refuse
    data["cluster"]["versions"] = {"triton": triton, "trtllm": TRTLLM_OF.get(triton, "1.3.0"), **versions}
    return data


# --- GPU Operator component matrix: branches and versions each line's page names -------------------------


@pytest.mark.parametrize(
    ("chart", "driver", "triton"),
    [
        ("v22.9.2", "510.108.03", "23.10"),  # v22.9 names R450 and R510 (the table had 470/515/520/525 only)
        ("v23.9.2", "550.54.14", "24.02"),  # v23.9.2's default; the table had R545 instead of R550
        ("v24.3.0", "560.35.03", "24.02"),  # added to the v24.3 page as a recommended update
        ("v24.9.2", "570.172.08", "24.02"),  # R570/R575/R580 added to the v24.9 page
        ("v25.3.4", "590.48.01", "24.02"),  # R590 added to the v25.3 page
        ("v25.10.1", "595.58.03", "24.02"),  # R590/R595/R610 named for v25.10.1
    ],
)
def test_a_driver_the_lines_matrix_names_is_accepted_without_warning(
    tmp_path: Path, chart: str, driver: str, triton: str
) -> None:
    checks, warnings = check_version(stack(tmp_path, triton=triton, gpu_operator=chart), driver)
    assert [c["check"] for c in checks] == ["triton", "gpu-operator"]
    assert warnings == []


def test_a_branch_the_lines_matrix_never_named_is_refused(tmp_path: Path) -> None:
    inventory = stack(tmp_path, gpu_operator="v23.9.2")  # the table claimed R545 for v23.9
    with pytest.raises(InvalidInput) as refused:
        check_version(inventory, "545.23.08")
    (problem,) = refused.value.problems
    assert problem.path == "--version" and "branch 545 is not supported by GPU Operator v23.9" in problem.message
    assert "470, 525, 535, 550" in problem.message


def test_an_unknown_operator_line_is_a_warning_naming_the_inventory_field(tmp_path: Path) -> None:
    checks, warnings = check_version(stack(tmp_path, gpu_operator="v23.6.1"), "550.54.15")
    assert [c["check"] for c in checks] == ["triton"]
    assert len(warnings) == 1 and warnings[0].startswith("cluster.versions.gpu_operator: GPU Operator v23.6.1")
    assert "was not checked" in warnings[0]


# --- Triton: the driver requirements of each release's notes ------------------------------------------------


def test_tritons_older_data_center_branches_are_accepted(tmp_path: Path) -> None:
    # 24.02's notes: "470.57 (or later R470)" on data-center GPUs; the table's single 525.85 minimum refused it
    checks, warnings = check_version(stack(tmp_path, gpu_operator="v23.9.2"), "470.239.06")
    assert checks[0] == {
        "check": "triton",
        "result": "470.239.06 >= 470.57, the least R470 driver Triton 24.02 (CUDA 12.3.2) allows",
    }
    assert warnings == []


def test_a_driver_below_its_branchs_floor_is_refused_even_above_525_85(tmp_path: Path) -> None:
    # 24.10 allows R535 from 535.86; 535.54.03 passed the table's 525.85 minimum
    with pytest.raises(InvalidInput) as refused:
        check_version(stack(tmp_path, triton="24.10", gpu_operator="v23.9.2"), "535.54.03")
    (problem,) = refused.value.problems
    assert "older than 535.86, the least R535 driver Triton 24.10 (CUDA 12.6.2)" in problem.message
    assert "560 or later" in problem.fix and "cluster.versions.triton" in problem.fix


def test_a_branch_tritons_notes_do_not_list_is_warned_not_passed(data: dict[str, Any]) -> None:
    # 23.10 needs R535, or R450/R470/R510/R525/R535 on data-center GPUs: R530 is neither
    warnings = valid(versions_of(data, triton="23.10", nvidia_driver="530.30.02")).warnings
    found = [w for w in warnings if w.path == "cluster.versions.nvidia_driver"]
    assert len(found) == 1 and "not among the drivers Triton 23.10 (CUDA 12.2.2)'s release notes allow" in (
        found[0].message
    )


def test_the_cuda_13_release_refuses_a_580_driver_below_580_95(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_version(stack(tmp_path, triton="25.12"), "580.82.07")
    assert "older than 580.95" in refused.value.problems[0].message


def test_the_release_whose_notes_name_no_driver_has_only_cuda_13s_floor(tmp_path: Path) -> None:
    # 26.07's notes: "based on CUDA 13.3.1 which requires the NVIDIA Driver release" (no number)
    with pytest.raises(InvalidInput) as refused:
        check_version(stack(tmp_path, triton="26.07"), "575.57.08")
    assert "575.57.08 is too old for Triton 26.07 (CUDA 13.3.1)" in refused.value.problems[0].message
    assert "580 or later" in refused.value.problems[0].fix
    checks, warnings = check_version(stack(tmp_path, triton="26.07"), "580.95.05")
    assert "triton" not in [c["check"] for c in checks]
    assert any("minor-version compatibility" in w and "name no driver" in w for w in warnings), warnings


def test_an_unknown_triton_release_is_a_warning_naming_the_inventory_field(
    tmp_path: Path, data: dict[str, Any]
) -> None:
    data = versions_of(data, triton="25.11", gpu_operator="v25.10.0")  # a line the driver matrix names
    found = [w for w in valid(data).warnings if w.path == "cluster.versions.triton"]
    assert any("Triton 25.11 is not in rackctl's driver matrix" in w.message for w in found)
    inventory_path = tmp_path / "cluster.yml"
    inventory_path.write_text(yaml.safe_dump(data, sort_keys=False))
    checks, warnings = check_version(load_inventory(inventory_path), "580.95.05")
    assert [c["check"] for c in checks] == ["gpu-operator"]
    assert warnings[0].startswith("cluster.versions.triton: Triton 25.11 is not in rackctl's driver matrix")


# --- The chart's default driver, per release (values.yaml), not per line -----------------------------------


def test_the_default_driver_is_the_chart_releases_own(data: dict[str, Any]) -> None:
    # v22.9.0 ships 515.65.01 (v22.9.1/2: 525.60.13); "" leaves the driver to the chart
    data = versions_of(data, triton="24.02", gpu_operator="v22.9.0", nvidia_driver="")
    expect(data, "cluster.versions.nvidia_driver", "515.65.01", "the default of GPU operator v22.9.0")


def test_a_patch_releases_default_is_checked_against_triton(data: dict[str, Any]) -> None:
    # v24.9.2 defaults to 550.144.03 (the table said 550.127.05 for all of v24.9); 24.10 does not list R550
    data = versions_of(data, triton="24.10", gpu_operator="v24.9.2", nvidia_driver="")
    found = [w for w in valid(data).warnings if w.path == "cluster.versions.nvidia_driver"]
    assert len(found) == 1 and found[0].message.startswith("driver 550.144.03 (the default of GPU operator v24.9.2)")


def test_an_unknown_chart_release_has_no_guessed_default(data: dict[str, Any]) -> None:
    data = versions_of(data, triton="25.12", gpu_operator="v25.10.7", nvidia_driver="")
    found = [w for w in valid(data).warnings if w.path == "cluster.versions.nvidia_driver"]
    assert len(found) == 1 and "default driver of GPU operator v25.10.7 is not known" in found[0].message
    assert "v25.10.0, v25.10.1" in found[0].message and "pin nvidia_driver" in found[0].fix


def test_the_operator_renders_the_chart_releases_default(tmp_path: Path) -> None:
    inventory = stack(tmp_path, triton="25.12", gpu_operator="v25.10.1", nvidia_driver="")
    assert driver_version(inventory, GpuProfile()) == "580.105.08"  # v25.10.0 ships 580.95.05
