"""LAST_WRITE_WINS joins: branches' writes applied in the order they arrived (docs/semantics.md#last-write-wins-joins).

A definition whose ``join_merge`` is LAST_WRITE_WINS (wiggle/_model.py, JoinMerge; the upstream
Wiggle protocol's definitions) joins this way instead of the strict fold (wiggle/_fast, fold_join):
each branch contributes its shallow diff against the context it started from (keys set, keys
removed), and a later arrival's write to a key replaces an earlier one, so no conflict is possible.
A FORK folds the arrived branch contexts at once (``fold_arrivals``); a FOR_EACH merges each
branch's writes as it arrives (``branch_writes``, ``merge_writes``) and applies them at the end
(``apply_merged``), so the branches' contexts are never kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import _fast
from .state import JoinState

__all__ = ["fold_arrivals", "branch_writes", "merge_writes", "apply_merged"]


def fold_arrivals(base: dict[str, Any], arrivals: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Fold branch contexts, in arrival order, onto the fork-time context ``base``.

    Each branch's shallow diff against ``base`` is applied in turn: a key it set takes its value,
    a key it removed goes, and a later branch overwrites an earlier one. A key a branch left as it
    was at the fork is no write, so it never undoes an earlier branch's change.
    """
    result = dict(base)
    for branch in arrivals:
        changed, removed = _fast.diff(base, branch)
        for key in removed:
            result.pop(key, None)
        result.update(changed)
    return result


def branch_writes(
    start: dict[str, Any], end: dict[str, Any], scoped: tuple[str, ...]
) -> tuple[dict[str, Any], list[str]]:
    """A branch's writes: its shallow diff from ``start`` to ``end``, without the ``scoped`` keys."""
    changed, removed = _fast.diff(start, end)
    for key in scoped:
        changed.pop(key, None)
    return changed, [key for key in removed if key not in scoped]


def merge_writes(join: JoinState, changed: dict[str, Any], removed: list[str]) -> None:
    """Add one arrival's writes to a FOR_EACH's accumulator: they replace earlier writes to a key."""
    merged = join.merged
    dropped = set(join.merged_removed)
    for key in removed:
        merged.pop(key, None)
        dropped.add(key)
    for key, value in changed.items():
        merged[key] = value
        dropped.discard(key)
    join.merged_removed = sorted(dropped)
    join.merged_count += 1


def apply_merged(base: dict[str, Any], join: JoinState) -> dict[str, Any]:
    """The context after a FOR_EACH: ``base`` with the merged writes applied."""
    return _fast.apply_diff(base, join.merged, join.merged_removed)
