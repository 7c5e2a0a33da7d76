"""Suggestions for a mistyped name: the one helper every inventory message uses."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """'did you mean X?' or a list of the valid choices."""
    options = sorted(options)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "valid keys: " + ", ".join(options) if options else ""
