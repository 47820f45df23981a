"""Unknown names, each shown with the closest known one: what a typo in a keyword, a query
parameter or a setting is answered with (wiggle/_testing/arguments.py, wiggle/_server/web/api.py)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["with_closest"]


def with_closest(unknown: Iterable[str], known: Iterable[str]) -> str:
    """``'stauts' (did you mean 'status'?), 'x'``: each of ``unknown``, quoted, with the closest
    of ``known`` where one is close enough."""
    candidates = list(known)
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, candidates, n=1)
        named.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(named)
