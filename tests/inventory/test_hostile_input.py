"""Hostile inventory files: refused with a Problem (path, message, fix) and exit 2, quickly, no traceback.

Real files, FIFOs and symlinks in a temporary directory; the CLI runs in a real subprocess where a hang or
a traceback would show.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from bootstrap.errors import InvalidInput
from bootstrap.inventory import Inventory, check_inventory
from bootstrap.inventory.loader import MAX_ALIAS_NODES, MAX_DEPTH, PYDANTIC_FIXES, load_yaml, problem_from_pydantic
from tests.inventory.conftest import SAMPLE, expect

ROOT = Path(__file__).resolve().parents[2]


def _refused(path: Path, *words: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        check_inventory(path)
    exc = info.value
    assert exc.problems and all(p.fix for p in exc.problems), exc.problems
    text = " ".join([exc.message, *(f"{p.message} {p.fix}" for p in exc.problems)])
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    return exc


def alias_bomb(levels: int = 10, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_fast(tmp_path):
    path = tmp_path / "bomb.yml"
    path.write_text(alias_bomb())  # 10 levels of 9 aliases: 9**9 values when expanded
    start = time.monotonic()
    _refused(path, "expands aliases too far", str(MAX_ALIAS_NODES), "fewer aliases")
    assert time.monotonic() - start < 2


def test_small_aliases_load_like_pyyaml_writes_them(tmp_path, monkeypatch):
    """PyYAML's own dump writes &id001/*id001 for shared objects: such an inventory stays valid."""
    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "not-used-here")
    data = yaml.safe_load(SAMPLE.read_text())
    shared = {"rack": "r1", "tier": "gpu"}
    data["nodes"][1]["labels"] = data["nodes"][2]["labels"] = shared
    text = yaml.safe_dump(data)
    assert "&id001" in text
    path = tmp_path / "inv.yml"
    path.write_text(text)
    assert len(check_inventory(path).inventory.nodes) == len(data["nodes"])


def test_recursive_and_deep_aliases_are_refused():
    with pytest.raises(InvalidInput, match="recursive alias"):
        load_yaml("a: &x [1, *x]\n")
    deep = "a: &d " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 40 + "*d" + "]" * 40 + "\n"
    with pytest.raises(InvalidInput, match="nested too deeply"):
        load_yaml(deep)
    with pytest.raises(InvalidInput) as info:
        load_yaml("a: x\nb: *nowhere\n")
    assert "undefined alias" in info.value.problems[0].message


def test_deep_nesting_is_a_problem_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.yml"
    path.write_text("[" * 1000)
    _refused(path, "nested", str(MAX_DEPTH))
    path.write_text("a:\n" + "".join(" " * (2 * i) + f"- k{i}:\n" for i in range(1, 200)))
    _refused(path, "nested")


def test_nesting_within_the_limit_still_loads():
    assert load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "inv.yml"
    os.mkfifo(fifo)
    start = time.monotonic()
    _refused(fifo, "named pipe (FIFO)", "regular file")
    assert time.monotonic() - start < 2


def test_directory_and_device_are_refused(tmp_path):
    _refused(tmp_path, "is a directory")
    _refused(Path("/dev/null"), "character device")


def test_symlink_loop_and_dangling_symlink(tmp_path):
    (tmp_path / "a.yml").symlink_to(tmp_path / "b.yml")
    (tmp_path / "b.yml").symlink_to(tmp_path / "a.yml")
    _refused(tmp_path / "a.yml", "symlink loop")
    (tmp_path / "gone.yml").symlink_to(tmp_path / "missing.yml")
    _refused(tmp_path / "gone.yml", "symlink to a missing file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without read permission")
def test_unreadable_file(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_text("a: 1\n")
    path.chmod(0)
    _refused(path, "permission denied", "chmod")


def test_non_utf8_names_the_byte_offset_and_line(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_bytes(b"cluster:\n  name: caf\xe9\n")
    exc = _refused(path, "byte 20 (0xe9)", "UTF-8", "iconv")
    assert exc.problems[0].line == 2


def test_valid_sample_still_loads():
    assert check_inventory(SAMPLE).inventory.nodes


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:99999", "127.0.0.1:0", "[127.0.0.1", "10.10.0.300", "idrac]", "[fd00::1]x", "host:", "https://a/b"],
)
def test_bad_bmc_addresses_are_refused_with_the_forms(data, address):
    data["nodes"][0]["bmc"]["address"] = address
    problem = expect(data, "nodes[0].bmc.address", address.split(":")[0].strip("[") if ":" in address else "")
    assert "host:port (port 1-65535)" in problem.fix or "https://" in problem.fix


@pytest.mark.parametrize(
    "address", ["10.10.0.11", "10.10.0.11:8443", "https://idrac-cp01.lab:443/", "[fd00::11]:443", "fd00::11"]
)
def test_good_bmc_addresses_pass(data, address):
    from tests.inventory.conftest import problems_of

    data["nodes"][0]["bmc"]["address"] = address
    assert not [p for p in problems_of(data) if p.path == "nodes[0].bmc.address"]


def test_unquoted_all_digit_mac_says_quote_it(data):
    doc = yaml.safe_load("mac: 10:20:30:40:50:59\n")
    assert isinstance(doc["mac"], int)  # YAML 1.1 sexagesimal: the reason for the hint
    data["nodes"][0]["interfaces"][0]["mac"] = doc["mac"]
    expect(data, "nodes[0].interfaces[0].mac", "base-60", 'quote it: mac: "10:20:30:40:50:59"')


@pytest.mark.parametrize("value", [True, False, 167772161, 10.5])
def test_an_address_that_yaml_read_as_a_number_or_boolean_is_refused(data, value):
    """pydantic's lax mode would turn ``ip: true`` into 0.0.0.1 and 167772161 into 10.0.0.1, silently."""
    data["nodes"][0]["interfaces"][0]["ip"] = value
    expect(data, "nodes[0].interfaces[0].ip", "is not an IPv4 address", "write it as text in dotted form")


def test_every_error_type_the_models_produce_has_a_fix(data):
    """Sweep every path of the sample with values of every kind; every pydantic error must get a fix."""
    from tests.inventory.test_fuzz import ALL_PATHS

    values = [None, 1, -1, 10**30, 1.5, float("inf"), True, "x", "", "a" * 300, [], [1], {}, {"zz": 1}]
    seen: set[str] = set()
    for path in ALL_PATHS:
        for value in [*values, "__delete__"]:
            doc = copy.deepcopy(data)  # the sample as loaded: plain dicts, lists and scalars
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if value == "__delete__":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            try:
                Inventory.model_validate(doc)
            except ValidationError as exc:
                for error in exc.errors(include_url=False):
                    problem = problem_from_pydantic(error)
                    assert problem.fix, f"no fix for {error['type']}: {problem}"
                    seen.add(error["type"])
    assert {"string_type", "model_type", "list_type", "int_parsing", "ip_v4_address", "missing"} <= seen


def test_fix_table_fills_in_context():
    problem = problem_from_pydantic(
        {
            "loc": ("networks", "oob", "vlan"),
            "type": "less_than_equal",
            "msg": "too big",
            "input": 5000,
            "ctx": {"le": 4094},
        }
    )
    assert problem.fix == "use a value of at most 4094"
    assert "string_type" in PYDANTIC_FIXES and "quote it" in PYDANTIC_FIXES["string_type"]


@pytest.mark.parametrize("content", ["fifo", "bomb", "deep", "latin1"])
def test_cli_exits_2_with_a_message_not_a_traceback(tmp_path, content):
    path = tmp_path / "inv.yml"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "bomb":
        path.write_text(alias_bomb())
    elif content == "deep":
        path.write_text("[" * 1000)
    else:
        path.write_bytes("name: café\n".encode("latin-1"))
    proc = subprocess.run(
        [sys.executable, "-m", "bootstrap", "validate", "-i", str(path)],
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "fix:" in proc.stderr
