"""What the in-memory store holds, in bytes: a running count of every write, for its byte bound.

An instance's footprint is the JSON size of its context, of what else it keeps that can grow with
user data (open joins' contexts, buffered signals, its retry point, fork branches' own contexts)
and the text of its history entries (plus a fixed cost per entry). History is counted at
each write; the rest when a count is read (ByteLedger): the context is measured again only when it
is a new object (a step replaced it), a join only for its new arrivals, the rest only when
present, so an instance costs at most one encode of its context per read of the count
(docs/semantics.md#bounded-memory; MemoryStore in wiggle/_storage/memory.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from .._engine.state import ACTIVE_TOKEN_STATUSES, Changes, HistoryEntry, InstanceState, JoinState, Token

__all__ = ["ByteLedger", "Footprint", "ENTRY_OVERHEAD"]

_encode = msgspec.json.Encoder().encode
#: what one history entry costs besides its error text: the object, its integers, the list slot
#: and its short strings (ids, node, kind, outcome, worker: names of bounded length, estimated)
ENTRY_OVERHEAD = 320


def entry_bytes(entry: HistoryEntry) -> int:
    """A history entry's cost: a fixed estimate plus the texts that can be long (an error, a
    traceback). Counted at every write, so it reads two fields, not ten."""
    return ENTRY_OVERHEAD + len(entry.error) + len(entry.traceback)


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
        return size + self.join_bytes

    @property
    def join_bytes(self) -> int:
        """The open joins' contexts."""
        return sum(entry[2] for entry in self.joins.values()) if self.joins else 0


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


class _Pending:
    """What writes changed in one instance since it was last measured (ByteLedger.settle)."""

    __slots__ = ("state", "tokens", "instance")

    def __init__(self, state: InstanceState) -> None:
        self.state = state
        self.tokens: dict[str, Token] = {}
        self.instance = False


class ByteLedger:
    """The bytes each instance of a store holds, and their sum (``used``).

    A write's history is counted at once (its entries' text); what it changed in the context, the
    joins, the extras and the branch contexts is noted and measured when a count is read
    (``used``, ``of``: the store reads them when a start must fit under the bound). An instance
    that moves several steps between two reads is measured once, with its latest context: the
    count read is always the count of what is held then.
    """

    def __init__(self) -> None:
        self._used = 0
        self._of: dict[str, Footprint] = {}
        self._pending: dict[str, _Pending] = {}

    @property
    def used(self) -> int:
        """Every byte counted, over all held instances."""
        if self._pending:
            self.settle()
        return self._used

    def settle(self) -> None:
        """Measure what the writes since the last read changed."""
        pending, self._pending = self._pending, {}
        for instance_id, noted in pending.items():
            footprint = self._of.get(instance_id)
            if footprint is not None:
                self._used += self._update(footprint, noted.state, noted.tokens.values(), noted.instance)

    def measure(self, state: InstanceState, changes: Changes) -> Footprint:
        """The footprint of a new instance (not counted until ``add``)."""
        footprint = Footprint()
        self._update(footprint, state, changes.tokens.values(), True)
        for entry in changes.history:
            footprint.history_bytes += entry_bytes(entry)
        return footprint

    def add(self, instance_id: str, footprint: Footprint) -> None:
        """Count a new instance's footprint."""
        self._of[instance_id] = footprint
        self._used += footprint.total

    def drop(self, instance_id: str) -> None:
        """Stop counting an instance (evicted, purged)."""
        self._pending.pop(instance_id, None)
        footprint = self._of.pop(instance_id, None)
        if footprint is not None:
            self._used -= footprint.total  # what was counted of it: _used is the sum of the totals

    def of(self, instance_id: str) -> int:
        """The bytes counted for one instance (0: not held)."""
        footprint = self._of.get(instance_id)
        if footprint is None:
            return 0
        noted = self._pending.pop(instance_id, None)
        if noted is not None:
            self._used += self._update(footprint, noted.state, noted.tokens.values(), noted.instance)
        return footprint.total

    def written(self, state: InstanceState, changes: Changes) -> None:
        """Note what a transition of a held instance changed (at every commit of the store,
        MemoryStore._apply: its history is counted now, the rest when a count is read)."""
        instance_id = state.instance.id
        footprint = self._of.get(instance_id)
        if footprint is None:
            return
        history = changes.history
        if history:
            grown = 0
            for entry in history:
                grown += entry_bytes(entry)
            footprint.history_bytes += grown
            self._used += grown
        noted = self._pending.get(instance_id)
        if noted is None:
            if not changes.instance_changed and footprint.branches is None:
                for token in changes.tokens.values():
                    if token.context is not None:
                        break
                else:
                    return  # nothing else it holds changed (a claim, a lease renewed)
            noted = self._pending[instance_id] = _Pending(state)
        noted.state = state
        noted.tokens.update(changes.tokens)
        noted.instance = noted.instance or changes.instance_changed

    @staticmethod
    def _update(footprint: Footprint, state: InstanceState, tokens: Iterable[Token], instance: bool) -> int:
        """Bring ``footprint``'s context, extras, joins and branch contexts up to date with the
        ``tokens`` that changed (and the instance, if ``instance``); returns how many bytes it grew."""
        grown = 0
        if instance:
            inst = state.instance
            context = inst.context
            if context is not footprint.context:
                size = len(_encode(context))
                grown += size - footprint.context_bytes
                footprint.context, footprint.context_bytes = context, size
            if inst.signals or inst.retry_point is not None or footprint.extra_bytes:
                size = _extras(state)
                grown += size - footprint.extra_bytes
                footprint.extra_bytes = size
            if inst.joins or footprint.joins:
                before = footprint.join_bytes
                _joins(footprint, inst.joins)
                grown += footprint.join_bytes - before
        branches = footprint.branches
        for token in tokens:
            if token.context is not None and token.status in ACTIVE_TOKEN_STATUSES:
                if branches is None:
                    branches = footprint.branches = {}
                size = len(_encode(token.context))
                grown += size - branches.get(token.id, 0)
                branches[token.id] = size
            elif branches:
                grown -= branches.pop(token.id, 0)
        return grown
