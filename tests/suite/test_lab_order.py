"""tests/installed_lab.py: the modules on the session's installed lab run last, the install's proof first and
the redeploy (which reinstalls a node the others configured) last of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.suite.inner_pytest import run_pytest

REPO = Path(__file__).resolve().parents[2]
LAB_MODULES = [
    "tests/provision/test_e2e_lab.py",
    "tests/inband/test_lab_networks.py",
    "tests/inband/test_network_stage_lab.py",
    "tests/inband/test_networks_role.py",
    "tests/inband/test_site_services_lab.py",
    "tests/day2/test_redeploy_vm.py",
]


def _collect(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_lab_modules_run_last_whole_and_the_install_proof_first() -> None:
    ids = _collect("tests/day2", "tests/inband", "tests/provision", "tests/lab/test_vms.py")
    modules = [nodeid.split("::", 1)[0] for nodeid in ids]
    tail = modules[len(modules) - sum(m in LAB_MODULES for m in modules) :]
    assert set(tail) == set(LAB_MODULES), tail  # every lab module, and only those, at the end
    assert list(dict.fromkeys(tail)) == LAB_MODULES  # each module whole, the install's proof first, redeploy last
    assert "tests/lab/test_vms.py" in modules[: -len(tail)]  # a test with VMs of its own ran before


def test_make_test_fast_leaves_every_vm_test_out() -> None:
    ids = _collect("-m", "not vm", "tests/inband", "tests/provision", "tests/lab", "tests/day2")
    modules = {nodeid.split("::", 1)[0] for nodeid in ids}
    vm_modules = {
        *LAB_MODULES,
        "tests/provision/test_flow_failures.py",
        "tests/provision/test_lab_deploy.py",
        "tests/provision/test_lab_seed.py",
    }
    assert not modules & vm_modules, modules & vm_modules
    assert not any("test_idrac_drives_its_vm" in nodeid for nodeid in ids)
    assert "tests/provision/test_render.py" in modules  # the rest stays


def test_under_xdist_the_vm_modules_and_the_nspawn_modules_each_run_whole_on_a_worker_of_their_own(
    tmp_path: Path,
) -> None:
    """A real ``pytest -n 2 --dist loadgroup`` (scripts/test.sh) over modules marked as the lab's and not: the
    nspawn machines' modules (``machine``, ``native_cluster``) on one worker in order, the VM module on the
    other, the rest beside them; a module with a VM test and an nspawn one goes with the VMs."""
    log = tmp_path / "ran.log"
    test = "def test_N():\n    open(LOG, 'a').write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + __name__ + ' N\\n')\n"
    tests = "".join(test.replace("N", str(n)) for n in range(3))
    body = "import os, pytest\nLOG = " + repr(str(log)) + "\nMARK\n" + tests
    (tmp_path / "tests").mkdir()
    native = {
        "test_b_machine": "pytestmark = pytest.mark.machine",
        "test_c_native": "pytestmark = pytest.mark.native_cluster",
    }
    vms = {
        "test_a_vm": "pytestmark = pytest.mark.vm",
        "test_d_both": "pytestmark = pytest.mark.machine",  # and its last test on VMs (below): with them, whole
    }
    free = {f"test_free_{i}": "" for i in range(5)} | {"test_free_lab": "pytestmark = pytest.mark.lab"}  # own ports
    for name, mark in {**native, **vms, **free}.items():
        (tmp_path / "tests" / f"{name}.py").write_text(body.replace("MARK", mark))
    both = tmp_path / "tests" / "test_d_both.py"
    both.write_text(both.read_text().replace("def test_2", "@pytest.mark.vm\ndef test_2"))
    xdist = ["-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "-p", "tests.installed_lab"]
    run_pytest(tmp_path, *xdist, "tests", timeout=300)
    rows = [line.split() for line in log.read_text().splitlines()]

    def ran(modules: dict[str, str]) -> list[tuple[str, str]]:
        return [(worker, f"{module}.{n}") for worker, module, n in rows if module.split(".")[-1] in modules]

    on_nspawn, on_vms = ran(native), ran(vms)
    assert len(on_nspawn) == 6 and len({worker for worker, _ in on_nspawn}) == 1, rows  # one worker each group
    assert len(on_vms) == 6 and len({worker for worker, _ in on_vms}) == 1, rows
    assert on_nspawn[0][0] != on_vms[0][0], rows  # beside each other
    for group in (on_nspawn, on_vms):
        assert [test for _, test in group] == sorted(test for _, test in group), rows  # in collection order
    assert {worker for worker, _, _ in rows} == {"gw0", "gw1"}, rows


INNER_CONFTEST = """
import pytest
from tests.installed_lab import InstalledLab

@pytest.fixture(scope="session")
def installed_lab(tmp_path_factory):
    lab_dir = tmp_path_factory.mktemp("lab")
    (lab_dir / "vms").mkdir()
    (lab_dir / "vms" / "gpu-01.serial.log").write_text("boot\\nINNER-PANIC-MARKER: kernel stopped\\n")
    return InstalledLab(None, None, None, lab_dir, None, ["gpu-01"])
"""
INNER_TESTS = """
def test_one_fails(installed_lab):
    assert False, "first"

def test_two_fails(installed_lab):
    assert False, "second"
"""


def test_the_first_failing_test_on_the_installed_lab_carries_the_lab_machines_state_once(tmp_path: Path) -> None:
    """A failure on the shared lab shows the VMs' consoles (what a lost node looked like), once per session."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_on_lab.py").write_text(INNER_TESTS)
    proc = run_pytest(tmp_path, "-p", "tests.installed_lab", "-p", "no:cacheprovider", "test_on_lab.py", returncode=1)
    out = proc.stdout
    assert "2 failed" in out, out[-3000:]
    assert out.count("the installed lab's machines") == 1, out[-3000:]
    assert "INNER-PANIC-MARKER: kernel stopped" in out and "gpu-01.serial.log" in out, out[-3000:]
