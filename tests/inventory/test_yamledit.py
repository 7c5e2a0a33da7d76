"""In-place YAML edits: exactly the lines that must change, verified by re-parsing."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from bootstrap.errors import InvalidInput
from bootstrap.inventory.yamledit import YamlEditor

TEXT = """\
# top comment
cluster:
    name: 'lab'          # four-space indent, single quotes
    note: >-
      a long folded string that a round-trip dump with another width would re-wrap onto other lines
      and keep going
    admin_ssh_keys:
    -   ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKxHjvM1vQ2K0e3C0Gm7Zl0p6w1nQyBqJq2c3e4f5g6h ops@example.com
nodes:
  - hostname: a
    bmc:
      address: "10.0.0.1"   # quoted
      user: root
    interfaces:
      - {name: pxe0, ip: 10.1.0.1}
      - {name: mgmt0, mac: 'aa:bb:cc:dd:ee:01'}

# the sizing block follows
sizing:
  users: 1
# trailing comment
"""


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def load(text: str) -> object:
    return YAML(typ="safe").load(text)


def test_replace_keeps_quoting_and_comment() -> None:
    editor = YamlEditor(TEXT)
    assert editor.set_scalar(("nodes", 0, "bmc", "address"), "10.0.0.9")
    assert changed_lines(TEXT, editor.text) == [
        '-      address: "10.0.0.1"   # quoted',
        '+      address: "10.0.0.9"   # quoted',
    ]
    editor.set_scalar(("cluster", "name"), "it's")
    assert "    name: 'it''s'          # four-space indent" in editor.text
    assert not editor.set_scalar(("cluster", "name"), "it's")  # same value: no change


def test_insert_into_flow_and_block_mappings_one_line_each() -> None:
    editor = YamlEditor(TEXT)
    editor.set_scalar(("nodes", 0, "interfaces", 0, "mac"), "10:20:30:40:50:01")
    editor.set_scalar(("nodes", 0, "interfaces", 1, "mac"), "aa:bb:cc:dd:ee:02")
    editor.set_scalar(("nodes", 0, "bmc", "port"), 443)
    diff = changed_lines(TEXT, editor.text)
    assert sorted(diff) == sorted(
        [
            "+      port: 443",
            "-      - {name: pxe0, ip: 10.1.0.1}",
            "-      - {name: mgmt0, mac: 'aa:bb:cc:dd:ee:01'}",
            '+      - {name: pxe0, ip: 10.1.0.1, mac: "10:20:30:40:50:01"}',
            "+      - {name: mgmt0, mac: 'aa:bb:cc:dd:ee:02'}",
        ]
    )
    doc = load(editor.text)
    assert doc["nodes"][0]["interfaces"][0]["mac"] == "10:20:30:40:50:01"  # a string, not a base-60 number
    assert doc["nodes"][0]["bmc"] == {"address": "10.0.0.1", "user": "root", "port": 443}
    assert "      port: 443\n" in editor.text


def test_top_level_block_replaced_and_appended_comments_kept() -> None:
    editor = YamlEditor(TEXT)
    editor.set_top_level("sizing", {"users": 2, "models": ["x"]})
    after = editor.text
    assert "# the sizing block follows\nsizing:\n  users: 2\n  models:\n    - x\n# trailing comment\n" in after
    assert changed_lines(TEXT, after) == ["-  users: 1", "+  users: 2", "+  models:", "+    - x"]
    assert not editor.set_top_level("sizing", {"users": 2, "models": ["x"]})
    editor.set_top_level("extra", {"a": 1})
    assert editor.text.endswith("# trailing comment\nextra:\n  a: 1\n") and load(editor.text)["extra"] == {"a": 1}
    assert "a long folded string that a round-trip dump" in editor.text  # never re-wrapped


def test_refusals_are_clear(tmp_path: Path) -> None:
    editor = YamlEditor(TEXT)
    with pytest.raises(InvalidInput, match=r"cannot edit nodes\.0\.bmc in YAML: the value is a list or mapping"):
        editor.set_scalar(("nodes", 0, "bmc"), "x")
    with pytest.raises(InvalidInput, match=r"cannot edit nodes\.3"):
        editor.set_scalar(("nodes", 3, "hostname"), "x")
    with pytest.raises(InvalidInput, match="multi-line"):
        editor.set_scalar(("cluster", "new"), "x")  # the mapping ends with a block list
    assert editor.text == TEXT
    with pytest.raises(InvalidInput, match="not valid YAML"):
        YamlEditor("a: [\n")
    with pytest.raises(InvalidInput, match="does not exist"):
        YamlEditor.load(tmp_path / "missing.yml")


def test_save_is_atomic_and_keeps_mode(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text(TEXT)
    path.chmod(0o600)
    editor = YamlEditor.load(path)
    editor.set_scalar(("nodes", 0, "hostname"), "b")
    editor.save()
    assert path.stat().st_mode & 0o777 == 0o600
    assert changed_lines(TEXT, path.read_text()) == ["-  - hostname: a", "+  - hostname: b"]
    assert [p.name for p in tmp_path.iterdir()] == ["inv.yml"]
