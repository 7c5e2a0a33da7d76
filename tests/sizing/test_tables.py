"""The transcribed tables: consistent, and equal to the design guide's text cell by cell."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bootstrap.sizing.tables import DesignGuideTables, parse_tables

# the design guide ships beside the checkout (../shared/seeds), as in CI; RACKCTL_SEEDS names another place
# (a git worktree elsewhere)
SEEDS = Path(os.environ.get("RACKCTL_SEEDS") or Path(__file__).resolve().parents[3] / "shared" / "seeds")
GUIDE = SEEDS / "dell-genai-inferencing-design-guide.txt"

#: Row labels of the guide -> keys of the data file.
ROW_KEYS = {
    "LLama 2 7B - FP8": "llama-2-7b/fp8",
    "LLama 2 7B - AWQ": "llama-2-7b/awq",
    "LLama 2 13B - FP8": "llama-2-13b/fp8",
    "LLama 2 13B - AWQ": "llama-2-13b/awq",
    "LLama 2 70B - FP8": "llama-2-70b/fp8",
    "LLama 2 70B - AWQ": "llama-2-70b/awq",
    "Mistral - FP8": "mistral-7b/fp8",
    "Falcon 180B - FP8": "falcon-180b/fp8",
}


def guide_table(caption: str) -> dict[str, list[str]]:
    """Rows of one tab-separated table of the guide, from its caption to the next blank-separated text."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(caption))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        label, _, rest = line.partition("\t")
        if label in ROW_KEYS:
            rows[ROW_KEYS[label]] = rest.split("\t")
        elif rows and len(rows) == len(ROW_KEYS):
            break
    return rows


def as_cell(text: str) -> float | str:
    text = text.strip()
    return float(re.sub(r"\s*GB$", "", text)) if re.match(r"^[0-9.]+( GB)?$", text) else text


# The guide's text is shared reference material of this workspace; without it only the self-checks run.
needs_guide = pytest.mark.skipif(not GUIDE.exists(), reason="design guide text not present")


@needs_guide
@pytest.mark.parametrize(
    ("caption", "attribute"),
    [
        ("Table 13.", "table_13_first_token_ms_input_128"),
        ("Table 14.", "table_14_first_token_ms_input_2048"),
        ("Table 15.", "table_15_tokens_per_s"),
    ],
)
def test_performance_tables_match_the_guide(tables: DesignGuideTables, caption: str, attribute: str) -> None:
    guide = guide_table(caption)
    ours = getattr(tables, attribute)
    assert set(guide) == set(ours)
    for key, cells in guide.items():
        assert [as_cell(c) for c in cells] == ours[key], key


@needs_guide
def test_memory_table_matches_the_guide(tables: DesignGuideTables) -> None:
    guide = guide_table("Table 11.")
    assert {k: as_cell(v[0]) for k, v in guide.items()} == tables.table_11_gpu_memory_gb


@needs_guide
def test_parallelism_table_matches_the_guide(tables: DesignGuideTables) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.findall(r"^(\d) x (L40S|H100 SXM)\tTP=(\d), PP=(\d)$", text, flags=re.M)
    ours = [(str(r.gpu_count), r.gpu, str(r.tp), str(r.pp)) for r in tables.table_12_optimal_parallelism]
    names = {"L40S": "l40s", "H100 SXM": "h100-sxm"}
    assert [(n, names[g], tp, pp) for n, g, tp, pp in found] == ours


def test_optimal_parallelism_is_all_tensor_parallel(tables: DesignGuideTables) -> None:
    # Table 12: on N GPUs the guide's best split is TP=N, PP=1 -- the planner only uses PP=1.
    for row in tables.table_12_optimal_parallelism:
        assert (row.tp, row.pp) == (row.gpu_count, 1)


def test_server_facts(tables: DesignGuideTables) -> None:
    servers = tables.servers
    assert (servers["xe9680"].gpu, servers["xe9680"].gpu_count) == ("h100-sxm", 8)
    assert (servers["xe8640"].gpu, servers["xe8640"].gpu_count) == ("h100-sxm", 4)
    assert {servers[s].gpu_count for s in servers if s.startswith("r760xa")} == {2, 4}
    assert all(s.max_tp <= 2 for s in servers.values() if s.gpu == "h100-pcie")  # NVLink-bridged pairs
    assert tables.gpus["l40s"].memory_gb == 48
    assert tables.gpus["h100-sxm"].memory_gb == tables.gpus["h100-pcie"].memory_gb == 80


def test_a_short_row_is_refused(tables: DesignGuideTables) -> None:
    data = tables.model_dump()
    data["table_13_first_token_ms_input_128"]["llama-2-7b/fp8"] = [1.0, 2.0]
    with pytest.raises(ValueError, match="llama-2-7b/fp8 has 2 cells"):
        parse_tables(data)


def test_model_aliases(tables: DesignGuideTables) -> None:
    assert tables.resolve_model("Mistral") == "mistral-7b"
    assert tables.resolve_model("Llama 2 70B") == "llama-2-70b"
    assert tables.resolve_model("gpt-4") is None
    assert tables.precisions_of("mistral-7b") == ["fp8"]
