"""``rackctl size`` fits the terminal: at 80 and 120 columns no line is wider and no name is cut (a server's
or a model's), for every sizing example the repository ships."""

from __future__ import annotations

import pytest
import yaml

from tests.cli.conftest import ROOT, rackctl

EXAMPLES = sorted((ROOT / "inventory" / "examples" / "sizing").glob("*.yaml"))


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_size_fits_the_terminal_and_cuts_no_name(example, columns: int) -> None:
    proc = rackctl("size", "-r", str(example), COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode in (0, 1), proc.stderr  # 1: some model fits no candidate (said in the output)
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    assert "…" not in proc.stdout  # nothing cut: names fold or get their width
    # the "Server options" table: every candidate's name whole in its first column
    options = [line.split("│") for line in lines if line.startswith("│ ") and " x " in line.split("│")[2]]
    servers = {cells[1].strip() for cells in options}
    candidates = set(yaml.safe_load(example.read_text()).get("candidate_servers") or [])
    assert servers and candidates <= servers, (servers, candidates)
    # the "Which servers fit" table's headers: each name whole, or broken only after a hyphen
    start = lines.index("Which servers fit each model") + 2
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("┡"))
    heads = [[c.strip() for c in line.split("┃")[2:-1]] for line in lines[start:end]]
    assert heads, lines[start : start + 5]
    names = ["".join(column) for column in zip(*heads, strict=True)]
    assert names == sorted(servers, key=[c[1].strip() for c in options].index), names
    assert all(part.endswith("-") for head in heads[:-1] for part in head if part), heads
