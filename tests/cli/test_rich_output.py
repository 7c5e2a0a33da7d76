"""Text from users and examples is printed verbatim: no rich markup, no emoji codes (``:CD:``)."""

from __future__ import annotations

import copy

import yaml

from bootstrap.cli.common import console, err_console
from tests.cli.conftest import rackctl
from tests.inventory.conftest import _SAMPLE_DATA


def test_fingerprint_example_is_not_an_emoji(tmp_path):
    data = copy.deepcopy(_SAMPLE_DATA)
    data["nodes"][0]["bmc"]["fingerprint"] = "AB:CD:[bold]x[/bold]"
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(data))
    proc = rackctl("validate", "-i", str(path))
    assert proc.returncode == 2
    assert "'AB:CD:...'" in proc.stderr  # the example in the fix, verbatim
    assert "'AB:CD:[bold]x[/bold]'" in proc.stderr  # the user's value, markup shown as typed
    assert "\N{OPTICAL DISC}" not in proc.stderr


def test_consoles_do_not_render_emoji_codes():
    for c in (console, err_console):
        with c.capture() as captured:
            c.print("AB:CD:EF :cd:")
        assert captured.get().strip() == "AB:CD:EF :cd:"
