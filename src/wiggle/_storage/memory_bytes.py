"""What the in-memory store holds, in bytes: a running count kept at every write, for its byte bound.

An instance's footprint is the JSON size of its context, of what else it keeps that can grow with
user data (open joins' contexts, buffered signals, its retry point, fork branches' own contexts)
and the text of its history entries (plus a fixed cost per entry). The count is kept up to date
at each write: the context is measured again only when it is a new object (a step replaced it),
a join only for its new arrivals, the rest only when present, so an ordinary step costs one
encode of the context it changed
(docs/semantics.md#bounded-memory; MemoryStore in wiggle/_storage/memory.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._engine.state import ACTIVE_TOKEN_STATUSES, Changes, HistoryEntry, InstanceState, JoinState

__all__ = ["ByteLedger", "Footprint", "ENTRY_OVERHEAD"]

_encode = msgspec.json.Encoder().encode
#: what one history entry costs besides its text (the object, its integers, the list slot)
ENTRY_OVERHEAD = 120


def entry_bytes(entry: HistoryEntry) -> int:
    """A history entry's cost: its text plus a fixed overhead."""
    return (
        ENTRY_OVERHEAD
        + len(entry.instance_id)
        + len(entry.token_id)
        + len(entry.node_id)
        + len(entry.kind)
        + len(entry.worker_id)
        + len(entry.outcome)
        + len(entry.error)
        + len(entry.child_id)
        + len(entry.traceback)
    )


class Footprint:
    """One instance's bytes: its context (and the object measured), extras, branch contexts, history."""

    __slots__ = ("context", "context_bytes", "extra_bytes", "joins", "branches", "history_bytes")

    def __init__(self) -> None:
        self.context: Any = None
        self.context_bytes = 0
        self.extra_bytes = 0  # buffered signals, the retry point
        self.joins: dict[str, tuple[JoinState, int, int]] | None = None  # group -> (join, arrivals, bytes)
        self.branches: dict[str, int] | None = None  # token id -> its own context's bytes
        self.history_bytes = 0

    @property
    def total(self) -> int:
        """Every byte counted for the instance."""
        size = self.context_bytes + self.extra_bytes + self.history_bytes
        if self.branches:
            size += sum(self.branches.values())
        if self.joins:
            size += sum(entry[2] for entry in self.joins.values())
        return size


def _extras(state: InstanceState) -> int:
    inst = state.instance
    size = 0
    if inst.signals:
        size += len(_encode(inst.signals))
    if inst.retry_point is not None:
        size += len(_encode(inst.retry_point))
    return size


def _joins(footprint: Footprint, joins: dict[str, JoinState]) -> None:
    """Count the open joins' contexts, encoding only what arrived since the last count (a
    FOR_EACH's join gains one arrival per branch: counting it whole each time would be quadratic)."""
    if not joins:
        footprint.joins = None
        return
    before = footprint.joins or {}
    now: dict[str, tuple[JoinState, int, int]] = {}
    for group, join in joins.items():
        known = before.get(group)
        if known is None or known[0] is not join:
            known = (join, 0, len(_encode(join.base)) + len(group))
        count, size = known[1], known[2]
        arrived = join.arrived
        if len(arrived) > count:
            for value in list(arrived.values())[count:]:
                size += len(_encode(value))
            count = len(arrived)
        now[group] = (join, count, size)
    footprint.joins = now


class ByteLedger:
    """The bytes each instance of a store holds, and their sum (``used``)."""

    def __init__(self) -> None:
        self.used = 0
        self._of: dict[str, Footprint] = {}

    def measure(self, state: InstanceState, changes: Changes) -> Footprint:
        """The footprint of a new instance (not counted until ``add``)."""
        footprint = Footprint()
        self._update(footprint, state, changes, True)
        return footprint

    def add(self, instance_id: str, footprint: Footprint) -> None:
        """Count a new instance's footprint."""
        self._of[instance_id] = footprint
        self.used += footprint.total

    def drop(self, instance_id: str) -> None:
        """Stop counting an instance (evicted, purged)."""
        footprint = self._of.pop(instance_id, None)
        if footprint is not None:
            self.used -= footprint.total

    def of(self, instance_id: str) -> int:
        """The bytes counted for one instance (0: not held)."""
        footprint = self._of.get(instance_id)
        return footprint.total if footprint is not None else 0

    def written(self, state: InstanceState, changes: Changes) -> None:
        """Count what a transition of a held instance changed."""
        footprint = self._of.get(state.instance.id)
        if footprint is None:
            return
        before = footprint.total
        self._update(footprint, state, changes, changes.instance_changed)
        self.used += footprint.total - before

    @staticmethod
    def _update(footprint: Footprint, state: InstanceState, changes: Changes, instance: bool) -> None:
        if instance:
            context = state.instance.context
            if context is not footprint.context:
                footprint.context = context
                footprint.context_bytes = len(_encode(context))
            footprint.extra_bytes = _extras(state)
            if state.instance.joins or footprint.joins:
                _joins(footprint, state.instance.joins)
        for token in changes.tokens.values():
            branches = footprint.branches
            if token.context is not None and token.status in ACTIVE_TOKEN_STATUSES:
                if branches is None:
                    branches = footprint.branches = {}
                branches[token.id] = len(_encode(token.context))
            elif branches:
                branches.pop(token.id, None)
        for entry in changes.history:
            footprint.history_bytes += entry_bytes(entry)
