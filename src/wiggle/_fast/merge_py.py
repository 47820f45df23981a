"""Context merge, the pure-Python reference twin of merge_c.pyx.

Contexts are JSON objects held as ``dict``. A step's change is its *shallow diff* against the
context it started from: the keys it set (new or changed value) and the keys it removed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["diff", "apply_diff", "fold_join", "JoinConflict"]

_MISSING = object()


class JoinConflict(Exception):
    """Two branches of a fork changed the same key; ``key``, ``first``, ``second`` say which."""

    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key, first, second)
        self.key = key
        self.first = first
        self.second = second


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The shallow diff turning ``before`` into ``after``: (keys set to new values, keys removed)."""
    changed: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key, _MISSING)
        if old is _MISSING or (old is not value and (type(old) is not type(value) or old != value)):
            changed[key] = value
    removed = [key for key in before if key not in after]
    return changed, removed


def apply_diff(context: dict[str, Any], changed: dict[str, Any], removed: list[str]) -> dict[str, Any]:
    """A new context: ``context`` with ``removed`` dropped and ``changed`` applied."""
    result = dict(context)
    for key in removed:
        result.pop(key, None)
    result.update(changed)
    return result


def fold_join(base: dict[str, Any], branches: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold the branch contexts of a fork onto the fork-time context ``base``, in branch order.

    Each branch contributes its shallow diff against ``base``. Raises JoinConflict when two
    branches changed (set or removed) the same key.
    """
    result = dict(base)
    owner: dict[str, int] = {}
    for index, branch in enumerate(branches):
        changed, removed = diff(base, branch)
        for key in changed:
            first = owner.get(key)
            if first is not None:
                raise JoinConflict(key, first, index)
            owner[key] = index
        for key in removed:
            first = owner.get(key)
            if first is not None:
                raise JoinConflict(key, first, index)
            owner[key] = index
        for key in removed:
            result.pop(key, None)
        result.update(changed)
    return result
