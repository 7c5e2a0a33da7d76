"""tests/budget.py: the per-area time budget printed at the end of pytest, widest area first, in 80 columns."""

from __future__ import annotations

from pathlib import Path

from tests.budget import WIDTH, Budget, area
from tests.suite.inner_pytest import run_pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_area_is_the_directory_under_tests() -> None:
    assert area("tests/inband/test_network_stage_lab.py::test_x") == "inband"
    assert area("tests/day2/test_kube.py::test_y[a/b]") == "day2"
    assert area("tests/test_top.py::t") == "(top)"
    assert area("inband/test_x.py::t") == "inband"  # run from inside tests/


def test_setup_call_and_teardown_of_a_test_count_once_as_one_test() -> None:
    budget = Budget()
    for seconds in (120.0, 3.0, 0.5):  # the installed lab's setup, the call, the teardown
        budget.add("tests/provision/test_e2e_lab.py::test_pxe", seconds)
    budget.add("tests/cli/test_doctor.py::test_a", 1.0)
    budget.add("tests/cli/test_doctor.py::test_b", 2.0)
    lines = budget.lines()
    assert all(len(line) <= WIDTH for line in lines)
    assert lines[1].split() == ["provision", "1", "123.5", "2.1", "97.6%"]
    assert lines[2].split() == ["cli", "2", "3.0", "0.1", "2.4%"]
    assert lines[-1].split() == ["total", "3", "126.5", "2.1", "100.0%"]


def test_pytest_prints_the_budget_per_directory_at_the_end(tmp_path: Path) -> None:
    for name, sleep in (("fast", 0.0), ("slow", 0.3)):
        (tmp_path / "tests" / name).mkdir(parents=True)
        (tmp_path / "tests" / name / f"test_{name}.py").write_text(
            f"import time\n\ndef test_one():\n    time.sleep({sleep})\n\ndef test_two():\n    pass\n"
        )
    proc = run_pytest(tmp_path, "-p", "tests.budget")
    out = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(out) if "time per area" in line)
    table = out[start + 1 : start + 5]
    assert table[0].split() == ["area", "tests", "seconds", "min", "share"]
    assert table[1].split()[:2] == ["slow", "2"] and float(table[1].split()[2]) >= 0.3  # the widest first
    assert table[2].split()[:2] == ["fast", "2"]
    assert table[3].split()[:2] == ["total", "4"]


def test_with_workers_it_ends_with_each_workers_busy_time_and_the_wall_time() -> None:
    budget = Budget()
    budget.add("tests/inband/test_a.py::t@machine-lab", 90.0, "gw0")
    budget.add("tests/cli/test_b.py::t", 30.0, "gw1")
    budget.add("tests/cli/test_b.py::u", 15.0, "gw1")
    lines = budget.worker_lines(100.0)
    assert all(len(line) <= WIDTH for line in lines)
    assert [line.split() for line in lines] == [
        ["worker", "gw0", "90.0", "1.5", "90.0%"],
        ["worker", "gw1", "45.0", "0.8", "45.0%"],
        ["wall", "100.0", "1.7"],
    ]
    assert Budget().worker_lines(100.0) == []  # no worker named: not an xdist run, no lines


def test_the_slowest_modules_come_first_with_the_workers_that_ran_them() -> None:
    budget = Budget()
    budget.add("tests/ansible/test_real.py::a", 300.0, "gw0")
    budget.add("tests/ansible/test_real.py::b", 30.0, "gw0")
    budget.add("tests/cli/test_doctor.py::a", 100.0, "gw1")
    budget.add("tests/cli/test_doctor.py::b", 1.0, "gw0")
    budget.add("tests/" + "x" * 70 + "/test_long.py::a", 0.5, "gw1")
    lines = budget.module_lines()
    assert all(len(line) <= WIDTH for line in lines)
    assert [line.split() for line in lines[:2]] == [
        ["tests/ansible/test_real.py", "gw0", "330.0s"],
        ["tests/cli/test_doctor.py", "gw0,gw1", "101.0s"],
    ]
    assert lines[2].split()[0].endswith("/test_long.py") and lines[2].startswith("...")
    assert len(budget.module_lines(count=1)) == 1


def test_under_xdist_the_table_names_each_worker(tmp_path: Path) -> None:
    (tmp_path / "tests" / "one").mkdir(parents=True)
    (tmp_path / "tests" / "one" / "test_one.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    proc = run_pytest(tmp_path, "-n", "2", "-p", "tests.budget")
    workers = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("worker ")]
    assert workers and set(workers) <= {"gw0", "gw1"}, proc.stdout
    assert any(line.startswith("wall ") for line in proc.stdout.splitlines()), proc.stdout
