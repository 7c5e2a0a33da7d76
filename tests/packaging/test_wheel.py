"""The built wheel is the product: installed outside the checkout, it inits, validates, renders, its
playbooks parse and the README's "Using it" runs as written; it carries neither the lab nor the benchmarks.

The wheel is built from this checkout and installed, with its dependencies from the package index (pip's
cache makes it quick on a second run), into one fresh virtualenv per session, in a temp directory, that sees
nothing of the project's venv or checkout: no borrowed site-packages, no ``PYTHONPATH`` (a checkout on it
would shadow the wheel and make pip skip it as installed), no Ansible collections from elsewhere
(``ANSIBLE_COLLECTIONS_PATH`` points at an empty directory). What it runs is what a new user gets from
``pip install rackctl``; the test asserts that every import path and every installed distribution lies in the
venv (or the interpreter's standard library).

Runtime on 2 cores with a warm pip cache: about 17 s alone, 45 s beside other tests (the build and install
7-15 s, the syntax checks 5-13 s); a cold cache downloads the base dependencies once. The README's "Using
it", run command by command (14 runs of ``rackctl``), adds about 20-30 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# one unit of work under pytest-xdist (--dist loadgroup): one worker builds the wheel and the venv, once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]


#: what a shell may carry that would make the venv see more than its own packages or this machine's Ansible
_LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "CONDA_PREFIX")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _clean_env() -> dict[str, str]:
    """This process's environment without what would leak the checkout or another venv into the fresh one."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS and not k.startswith(("RACKCTL_", "ANSIBLE_"))}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        cwd=out,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (found,) = out.glob("rackctl-*.whl")
    return found


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel and its dependencies installed; its bin directory."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    env = _clean_env()
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent, env).returncode == 0
    py = venv / "bin" / "python"
    # this venv's pip, run against the new one (which has none): it installs there, from the package index
    install = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheel)], venv.parent, env)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    assert (venv / "bin" / "rackctl").is_file(), install.stdout[-3000:] + install.stderr[-3000:]
    return venv / "bin"


def _isolated_env(installed: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a new user: the installed venv first on PATH, no RACKCTL_*, no other collections."""
    env = _clean_env()
    env["PATH"] = f"{installed}{os.pathsep}{env.get('PATH', '')}"
    (tmp_path / "no-collections").mkdir(exist_ok=True)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(tmp_path / "no-collections")
    env["HOME"] = str(tmp_path)  # no ~/.ansible of this machine's user
    return env


def test_the_fresh_venv_sees_only_its_own_packages(installed: Path, tmp_path: Path) -> None:
    probe = (
        "import json, sys, importlib.metadata as m; "
        "print(json.dumps({'prefix': sys.prefix, 'base': sys.base_prefix, 'path': sys.path, "
        "'dists': sorted({str(d.locate_file('')) for d in m.distributions()})}))"
    )
    run = _run([str(installed / "python"), "-c", probe], tmp_path, _isolated_env(installed, tmp_path))
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    venv = str(installed.parent)
    assert found["prefix"] == venv and found["base"] != venv
    stdlib = str(Path(found["base"]) / "lib")
    outside = [p for p in found["path"] if p and not p.startswith((venv, stdlib))]
    assert outside == [], outside  # no .pth, PYTHONPATH or user site lends it another tree
    assert found["dists"] and all(d.startswith(venv) for d in found["dists"]), found["dists"]


def test_the_wheel_ships_playbooks_roles_and_examples_but_no_lab_or_bench(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "bootstrap/_share/playbooks/site.yml" in names
    assert "bootstrap/_share/roles/preflight/tasks/main.yml" in names
    assert "bootstrap/_share/examples/dvd-inference.yml" in names
    assert "bootstrap/_share/ansible.cfg" in names
    assert not [n for n in names if n.startswith(("rackctl_lab/", "bench/", "tests/", "lab/"))]
    assert not [n for n in names if "/peer/" in n or "/idrac/" in n]


def test_installed_rackctl_inits_validates_and_renders_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    env = _isolated_env(installed, tmp_path)
    rackctl = str(installed / "rackctl")
    where = _run([str(installed / "python"), "-c", "import bootstrap; print(bootstrap.__file__)"], tmp_path, env)
    assert where.returncode == 0 and str(installed.parent) in where.stdout, where  # the wheel's copy, not the repo
    no_lab = _run([str(installed / "python"), "-c", "import rackctl_lab"], tmp_path, env)
    assert no_lab.returncode != 0 and "ModuleNotFoundError" in no_lab.stderr

    init = _run([rackctl, "init", "--example", "dvd-inference", "-o", "cluster.yml"], tmp_path, env)
    assert init.returncode == 0, init.stderr
    assert (tmp_path / "cluster.yml").read_text().startswith("#")

    validate = _run([rackctl, "validate", "-i", "cluster.yml", "--json"], tmp_path, env)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert json.loads(validate.stdout)["ok"] is True

    render = _run(
        [rackctl, "inventory", "render", "-i", "cluster.yml", "--state-dir", "state", "--json"], tmp_path, env
    )
    assert render.returncode == 0, render.stdout + render.stderr
    assert (tmp_path / "state" / "ansible" / "inventory" / "hosts.yml").is_file()

    lab = _run([rackctl, "lab", "--help"], tmp_path, env)
    assert lab.returncode != 0  # the lab is not part of the product


def test_shipped_playbooks_parse_from_the_installed_location(installed: Path, tmp_path: Path) -> None:
    env = _isolated_env(installed, tmp_path)
    where = _run([str(installed / "python"), "-c", "import bootstrap.resources as r; print(r.SHARE)"], tmp_path, env)
    share = Path(where.stdout.strip())
    assert str(installed.parent) in str(share), where
    playbooks = sorted((share / "playbooks").glob("*.yml"))
    assert [p.name for p in playbooks] == sorted(p.name for p in (REPO / "playbooks").glob("*.yml"))
    env.update(ANSIBLE_CONFIG=str(share / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(share / "roles"))
    ansible_playbook = str(installed / "ansible-playbook")  # the installed product's own, not this venv's
    for playbook in playbooks:
        check = _run([ansible_playbook, "--syntax-check", "-i", "localhost,", str(playbook)], tmp_path, env)
        assert check.returncode == 0, f"{playbook.name}: {check.stdout}{check.stderr}"


def test_doctor_of_the_base_install_is_complete_and_names_the_missing_extras(installed: Path, tmp_path: Path) -> None:
    env = _isolated_env(installed, tmp_path)
    core = _run([str(installed / "rackctl"), "doctor", "--json"], tmp_path, env)
    assert core.returncode == 0, core.stdout + core.stderr
    checks = {c["name"]: c for c in json.loads(core.stdout)["checks"]}
    # every module, lookup, filter and test of the shipped content resolves with ansible-core alone
    plugins = checks["shipped roles' collections"]
    assert plugins["ok"] is True and plugins["found"].endswith("ansible.builtin only"), plugins
    not_ok = [c for c in checks.values() if c["group"] == "core" and not c["ok"]]
    assert not_ok == [], not_ok
    cluster = _run([str(installed / "rackctl"), "doctor", "--require", "cluster", "--json"], tmp_path, env)
    assert cluster.returncode == 3, cluster.stdout + cluster.stderr
    extras = {c["name"]: c for c in json.loads(cluster.stdout)["checks"] if c["group"] != "core"}
    for extra in ("cluster", "triton", "load-check"):  # none installed, each named with its fix and its commands
        entry = extras[f"rackctl[{extra}]"]
        assert entry["ok"] is False and entry["install"].endswith(f"pip install 'rackctl[{extra}]'"), entry
        assert entry["needed_by"] and "missing" in entry["found"], entry


def test_the_base_install_has_no_triton_client_and_says_which_extra_brings_it(installed: Path, tmp_path: Path) -> None:
    env = _isolated_env(installed, tmp_path)
    for heavy in ("tritonclient", "numpy", "grpc", "gevent", "google.protobuf"):
        probe = _run([str(installed / "python"), "-c", f"import {heavy}"], tmp_path, env)
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, heavy
    rackctl = str(installed / "rackctl")
    assert _run([rackctl, "init", "--example", "dvd-inference", "-o", "cluster.yml"], tmp_path, env).returncode == 0
    render = _run([rackctl, "triton", "render", "-i", "cluster.yml", "--state-dir", "state", "--json"], tmp_path, env)
    assert render.returncode == 0, render.stdout + render.stderr
    check = _run([rackctl, "triton", "check", "state/triton", "--skip-engine", "--json"], tmp_path, env)
    assert check.returncode == 3, check.stdout + check.stderr
    assert "pip install 'rackctl[triton]'" in check.stdout and "Traceback" not in check.stderr
    load = _run([rackctl, "triton", "load-check", "--state-dir", "state", "--json"], tmp_path, env)
    assert load.returncode == 3, load.stdout + load.stderr
    assert "pip install 'rackctl[load-check]'" in load.stdout and "Traceback" not in load.stderr
    for argv in (["triton", "manifests", "--state-dir", "state"], ["render", "cluster", "-o", "cluster"]):
        cluster = _run([rackctl, *argv, "-i", "cluster.yml"], tmp_path, env)  # the cluster extra's schemas
        assert cluster.returncode == 3, cluster.stdout + cluster.stderr
        assert "pip install 'rackctl[cluster]'" in cluster.stdout + cluster.stderr
        assert "Traceback" not in cluster.stderr
    triton = _run([rackctl, "doctor", "--require", "triton", "--json"], tmp_path, env)
    assert triton.returncode == 3
    entry = next(c for c in json.loads(triton.stdout)["checks"] if c["name"] == "rackctl[triton]")
    assert "tritonclient" in entry["found"] and "triton check" in " ".join(entry["needed_by"])


def test_the_installed_entry_point_prints_each_shells_completion_script(installed: Path, tmp_path: Path) -> None:
    """The commands docs/operators.md gives (``_RACKCTL_COMPLETE=<shell>_source rackctl``), run as installed."""
    env = _isolated_env(installed, tmp_path)
    marks = {
        "bash": "complete -o nosort -F _rackctl_completion rackctl",
        "zsh": "#compdef rackctl",
        "fish": "complete --no-files --command rackctl",
    }
    for shell, mark in marks.items():
        script = _run([str(installed / "rackctl")], tmp_path, {**env, "_RACKCTL_COMPLETE": f"{shell}_source"})
        assert script.returncode == 0 and mark in script.stdout, f"{shell}: {script.stdout}{script.stderr}"
    words = {**env, "_RACKCTL_COMPLETE": "bash_complete", "COMP_WORDS": "rackctl lo", "COMP_CWORD": "1"}
    done = _run([str(installed / "rackctl")], tmp_path, words)
    assert done.returncode == 0 and done.stdout.split() == ["plain,logs"], done.stdout + done.stderr


#: The commands of the README's "Using it" (and docs/operators.md's "First inventory") run from the installed
#: wheel in an empty directory, with no rack: per command (its leading words), the exit status and a text its
#: output holds. A non-zero status must be the one the comment on that line of the doc gives (``exit N``).
README_RUNS: dict[str, tuple[int, str]] = {
    "init": (0, "wrote inventory/cluster.yml from sample dvd-inference"),
    "validate": (0, "ok inventory/cluster.yml: cluster dvd-inference"),
    "doctor": (0, "pip install 'rackctl[cluster]'"),
    "inventory render": (0, "wrote .rackctl/ansible/inventory"),
    "plan": (0, "rackctl up would"),
    "journal show": (2, "no journal in .rackctl yet"),
    "runs": (2, "no journal in .rackctl yet"),
    "apply": (0, "rackctl apply would"),
    "redeploy": (2, "it was never installed"),  # the node exists in the sample; `up` has not installed it
    "driver upgrade": (0, "planned, not applied"),
    "size": (0, "Placement on"),
    "triton render": (0, "wrote 4 files"),
    "triton check": (3, "pip install 'rackctl[triton]'"),  # the base install: the extra is named
    "render cluster": (3, "pip install 'rackctl[cluster]'"),
}

#: The README's commands that need a rack or a cluster, so not run here, and why.
README_NOT_RUN: dict[str, str] = {
    "discover": "reads each node's hardware from its iDRAC over Redfish: needs the rack's BMCs",
    "up": "proves the BMCs, then reimages and configures the nodes: needs the rack",
    "status": "reads power, health and firmware from each iDRAC and the cluster: needs the rack's BMCs",
    "validate-cluster": "checks a running cluster through its kubeconfig: needs the cluster",
}


def _doc_commands(doc: str, heading: str) -> list[tuple[list[str], str]]:
    """The first ``sh`` block under ``heading`` in ``doc``: per line, its words (comment dropped) and its comment."""
    text = (REPO / doc).read_text(encoding="utf-8")
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    lines = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.strip():
            words = shlex.split(line, comments=True)
            comment = line[len(line.split(" #", 1)[0]) :]
            lines.append((words, comment))
    return lines


def _command_key(argv: list[str]) -> str:
    """The longest run of leading words of ``rackctl ARGV`` that the tables above know, or the first word."""
    leading: list[str] = []
    for word in argv:
        if word.startswith("-"):
            break
        leading.append(word)
    for n in range(len(leading), 0, -1):
        key = " ".join(leading[:n])
        if key in README_RUNS or key in README_NOT_RUN:
            return key
    return " ".join(leading[:1])


def _run_doc_commands(doc: str, heading: str, installed: Path, tmp_path: Path) -> set[str]:
    """Run the block's commands that need no rack, in order, in an empty directory; the commands seen.

    Each exits as README_RUNS says, with no traceback, and a non-zero exit is the one its comment states.
    """
    env = _isolated_env(installed, tmp_path)
    work = tmp_path / "operator"
    work.mkdir()
    seen: set[str] = set()
    for words, comment in _doc_commands(doc, heading):
        chain: list[list[str]] = [[]]
        for word in words:  # `a && b`: b runs once a exits 0
            if word == "&&":
                chain.append([])
            else:
                chain[-1].append(word)
        for position, argv in enumerate(chain):
            assert argv[:1] == ["rackctl"], f"not a rackctl command in {doc}'s {heading}: {' '.join(words)}"
            key = _command_key(argv[1:])
            seen.add(key)
            if key in README_NOT_RUN:
                continue
            assert key in README_RUNS, f"{doc} has `rackctl {key}`: add it to README_RUNS or README_NOT_RUN"
            code, text = README_RUNS[key]
            run = _run([str(installed / "rackctl"), *argv[1:]], work, env)
            output = run.stdout + run.stderr
            shown = f"`{' '.join(argv)}` exited {run.returncode}:\n{output[-3000:]}"
            assert run.returncode == code and text in " ".join(output.split()), shown
            assert "Traceback" not in output, shown
            if code:
                assert f"exit {code}" in comment, f"{doc} does not say `exit {code}` for `{' '.join(argv)}`"
                assert position == len(chain) - 1, f"`{' '.join(argv)}` exits {code}: the && after it never runs"
    return seen


def test_the_readme_using_it_runs_from_the_installed_wheel_in_an_empty_directory(
    installed: Path, tmp_path: Path
) -> None:
    """Each command of "Using it" that needs no rack exits as documented there, no traceback, in README order."""
    seen = _run_doc_commands("README.md", "## Using it", installed, tmp_path)
    assert seen == set(README_RUNS) | set(README_NOT_RUN), "a command of the tables is gone from the README"


def test_the_operators_guides_first_inventory_runs_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """docs/operators.md's "First inventory" block, the same way: it names only what a wheel user has."""
    seen = _run_doc_commands("docs/operators.md", "## First inventory", installed, tmp_path)
    assert {"init", "validate"} <= seen, seen


def test_the_sample_inventorys_header_names_only_what_a_wheel_user_has(installed: Path, tmp_path: Path) -> None:
    """The comment atop what ``rackctl init`` writes names paths that exist after it, in an empty directory."""
    env = _isolated_env(installed, tmp_path)
    init = _run([str(installed / "rackctl"), "init", "--example", "dvd-inference"], tmp_path, env)
    assert init.returncode == 0, init.stdout + init.stderr
    text = (tmp_path / "inventory" / "cluster.yml").read_text(encoding="utf-8")
    header = "\n".join(line for line in text.split("\ncluster:", 1)[0].splitlines() if line.startswith("#"))
    paths = re.findall(r"(?<![\w$/.-])(?:[\w.-]+/)+[\w.-]+", header)
    assert paths, header  # it says where the file is
    missing = [p for p in paths if not (tmp_path / p).exists()]
    assert missing == [], f"the sample's header names {missing}, absent for a wheel user:\n{header}"
