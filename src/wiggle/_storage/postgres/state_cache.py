"""What this server last wrote of each instance, so that its next transition need not read it.

A transition is a read-modify-write: the group commit locks and reads the instances (one round
trip), runs the actions, then writes and commits (a second). On a quiet server every step of an
instance is such a group of one, and the read's round trip is a sixth of a step's latency (bench/
README.md, "Round sixteen"). But the server that committed an instance's last transition knows
what it wrote. ``StateCache`` keeps that, with the instance's **print**: its row's ``xmin`` and
each active token's id and ``xmin``. ``xmin`` names the transaction that wrote a row's version,
so while the database's print equals the kept one, nobody has changed the instance or its active
tokens since — not another server, not a claim, not an operator. The next transition of a kept
instance runs its action on a copy of what was kept, and sends the check
(``expect_unchanged``, migration 0021: the locks, then the prints compared) and the writes as one
statement outside any transaction block, its own transaction (writes.py ``write_checked``): one
round trip, and none of the pipeline's BEGIN, sync and COMMIT (on the client, 0.12 ms of CPU
against 0.31 for the same work pipelined: bench/README.md, "Round twenty"). A different print
fails the check before anything is written (SQLSTATE WG003); the server forgets the instances and runs the group again the usual way, reading them.
Nothing is answered before the commit, so an action run on a stale copy answers nobody.

Prints are exact: the rows a transaction writes all get its id as ``xmin`` (the lock's statement
and the check return it), and the rows it did not write keep theirs. A print that is wrong the
other way (a row the server believes it wrote and did not) only makes the check fail: a read
too many, never a stale state. The copies are msgpack bytes, decoded afresh for each
transition, so no action and no caller shares an object with the cache.

Where the prints would keep failing (several servers taking turns on the same instances, a busy
server whose steps are claimed in between), a failed check costs a round trip; ``StateCache``
stops using the copies while more than ``MAX_STALE_SHARE`` of its recent checks failed, and
tries one again every ``RETRY_EVERY`` groups. This server's own claims forget the instances they
claim (their tokens' ``xmin`` changes), so a busy single server does not pay for them.

Starts are kept too (``PostgresStore._started``): the start's transaction returns its id
(start_commit.py), the ``xmin`` of every row it wrote, so an instance whose first step was handed
to a waiting poll in it (wiggle/_storage/handoff.py) reports that step without a read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import msgspec

from ..._engine.state import FINISHED_INSTANCE_STATUSES, Changes, Instance, InstanceState, Token, TokenStatus

__all__ = ["StateCache", "STALE", "print_of"]

#: SQLSTATE of ``expect_unchanged`` (migration 0021): an instance changed since it was kept.
STALE = "WG003"

_Kept = tuple[Instance, list[Token]]
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Kept)


def print_of(instance_xmin: str, token_xmins: dict[str, str]) -> str:
    """The print ``expect_unchanged`` computes: the row's xmin, then id@xmin of each active token
    in byte order of the ids."""
    return instance_xmin + "|" + ",".join(f"{tid}@{token_xmins[tid]}" for tid in sorted(token_xmins))


class _Entry:
    __slots__ = ("data", "instance_xmin", "token_xmins")

    def __init__(self, data: bytes, instance_xmin: str, token_xmins: dict[str, str]) -> None:
        self.data = data
        self.instance_xmin = instance_xmin
        self.token_xmins = token_xmins


class StateCache:
    """Instances as this server last committed them, with their prints (LRU, bounded)."""

    MAX_ENTRIES = 4096
    MAX_BYTES = 32 << 20  # of all copies together, about (the least recently used go first)
    MAX_BYTES_PER_ENTRY = 64 << 10  # a larger instance is read each time
    MAX_STALE_SHARE = 0.25  # of the recent checks that failed, above which copies are not used
    RETRY_EVERY = 16  # groups: while not used, one in this many tries a copy anyway
    WINDOW = 64  # checks remembered for that share

    def __init__(self) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0  # of the copies held
        self._recent: list[bool] = []  # the last WINDOW checks: True where it failed
        self._skipped = 0
        self.hits = 0  # groups committed on kept copies (tests, the benchmark)
        self.stale = 0  # checks that failed

    def __len__(self) -> int:
        return len(self._entries)

    def take(
        self, ids: list[str]
    ) -> tuple[dict[str, InstanceState], dict[str, dict[str, str]], list[str]] | None:
        """Fresh states of ``ids`` (sorted) from the kept copies, their tokens' xmins and their
        prints; None if one is not kept or the copies are not in use now."""
        entries = self._entries
        kept = [entries.get(iid) for iid in ids]
        if any(e is None for e in kept):
            return None
        if self._stale_share() > self.MAX_STALE_SHARE:
            self._skipped += 1
            if self._skipped % self.RETRY_EVERY:
                return None
        states: dict[str, InstanceState] = {}
        xmins: dict[str, dict[str, str]] = {}
        prints: list[str] = []
        for iid, entry in zip(ids, kept, strict=True):
            assert entry is not None
            instance, tokens = _DECODER.decode(entry.data)
            states[iid] = InstanceState(instance, {t.id: t for t in tokens})
            xmins[iid] = {"": entry.instance_xmin, **entry.token_xmins}
            prints.append(print_of(entry.instance_xmin, entry.token_xmins))
            entries.move_to_end(iid)
        return states, xmins, prints

    def checked(self, failed: bool, ids: Iterable[str]) -> None:
        """A check's outcome; a failed one forgets ``ids``."""
        recent = self._recent
        recent.append(failed)
        if len(recent) > self.WINDOW:
            del recent[0]
        if failed:
            self.stale += 1
            self.forget(ids)
        else:
            self.hits += 1

    def _stale_share(self) -> float:
        recent = self._recent
        return sum(recent) / len(recent) if len(recent) >= 8 else 0.0

    def keep(self, state: InstanceState, changes: Changes | None, before: dict[str, str], xid: str) -> None:
        """Keep ``state`` as its transaction (``xid``) committed it. ``before``: the xmins read or
        kept before it ("" the instance row's, else by token id); ``changes``: what it wrote."""
        iid = state.instance.id
        if state.instance.status in FINISHED_INSTANCE_STATUSES or any(
            t.status == TokenStatus.READY for t in state.tokens.values()
        ):
            # Finished: nothing more is expected of it. A READY step: a claim comes next, which
            # changes the token (a SERVER-mode step not handed to a waiting poll).
            self._drop(iid)
            return
        wrote_instance = changes is not None and (changes.created or changes.instance_changed)
        written = changes.tokens if changes is not None else {}
        token_xmins: dict[str, str] = {}
        for tid in state.tokens:
            xmin = xid if tid in written else before.get(tid)
            if xmin is None:  # a token neither read nor written here: not to be trusted
                self._drop(iid)
                return
            token_xmins[tid] = xmin
        instance_xmin = xid if wrote_instance else before.get("")
        if instance_xmin is None:
            self._drop(iid)
            return
        try:
            data = _ENCODER.encode((state.instance, list(state.tokens.values())))
        except OverflowError:
            # An integer past 64 bits in a context (JSON has no limit; msgpack has): read each
            # time. This runs after the commit, so it must not fail the caller's answer.
            self._drop(iid)
            return
        if len(data) > self.MAX_BYTES_PER_ENTRY:
            self._drop(iid)
            return
        entries = self._entries
        self._drop(iid)
        entries[iid] = _Entry(data, instance_xmin, token_xmins)
        self._bytes += len(data)
        while len(entries) > self.MAX_ENTRIES or self._bytes > self.MAX_BYTES:
            _, oldest = entries.popitem(last=False)
            self._bytes -= len(oldest.data)

    def _drop(self, iid: str) -> None:
        entry = self._entries.pop(iid, None)
        if entry is not None:
            self._bytes -= len(entry.data)

    def forget(self, ids: Iterable[str]) -> None:
        """Drop the copies of ``ids`` (this server changed them without the group commit)."""
        for iid in ids:
            self._drop(iid)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
