"""A PostgreSQL claim's transaction (store.py ``PostgresStore.claim`` runs it, and retries it).

One transaction takes the due READY rows a claim may take (candidates.py), admits them under their
limits (limits.py ``Admission``), runs the claim's transition on each (the engine leases the token
to the worker) and writes what changed in one statement, whose query first confirms the keys'
room when the claim admitted on its read's counts (writes.py ``ChangeWriter.statement``). The
store around it reserves the fast rates' moments before it and gives back what it did not use,
counts, announces the commit, and runs it again under the keys' locks when the confirmation finds
a key with less room (``KeyRoomTaken``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from psycopg import errors as pg_errors

from ..._engine.engine import Claimed
from ..._engine.state import Changes, InstanceState, InstanceStatus, Token
from ...errors import Unavailable
from ..base import NOTHING_SKIPPED, ClaimTransition, Skip, WorkflowRecord
from ..queue_limits import QueueLimit
from .candidates import claim_candidates
from .codecs import N_TOKEN, instance_from
from .db import Conn, transaction
from .group_commit import Items
from .limits import Admission
from .rate_blocks import Reservation
from .statements import Queries

__all__ = ["ClaimAttempt", "ClaimTransaction", "KeyRoomTaken"]

log = logging.getLogger("wiggle.postgres")

#: Writes a transaction's items, with a check run first in the same statement (store.py ``_persist``).
Persist = Callable[
    [Conn, Items, "set[str] | frozenset[str]", "tuple[str, list[Any]] | None"], Awaitable[bool]
]
#: A workflow version's record, as the definitions cache loads it (definitions.py ``loaded_record``).
LoadRecord = Callable[[Conn, str, str], Awaitable[WorkflowRecord]]


class KeyRoomTaken(Exception):
    """A claim admitted on its read's counts found a key with less room under the lock (limits.py)."""


#: How long a claim whose COMMIT's answer was lost waits for PostgreSQL to settle its transaction
#: (the cut session's backend ending it), in seconds.
LOST_CLAIM_WAIT = 5.0


class ClaimAttempt:
    """What a claim's transaction was about to commit: its transaction id (``xid``, with its
    epoch: "" when it took nothing) and its result, set just before its COMMIT. When the COMMIT's
    answer is lost (``CommitUnknown``), the store asks PostgreSQL whether that transaction
    committed (``settle``): if so, this result is the claim's (its steps are leased
    to the worker, who must get them), else the claim runs again."""

    __slots__ = ("result", "xid")

    def __init__(self) -> None:
        self.xid = ""
        self.result: tuple[list[Claimed], list[tuple[str, Changes]]] | None = None

    def clear(self) -> None:
        self.xid, self.result = "", None

    async def settle(
        self, conn: Conn, xact_status: str
    ) -> tuple[list[Claimed], list[tuple[str, Changes]]] | None:
        """What became of the run whose COMMIT's answer was lost (``result`` is set): its result
        if its transaction committed, None if it aborted (the claim runs again); cleared either
        way. ``xact_status`` is the statement asking ``pg_xact_status``; a transaction still in
        progress is asked about again for up to LOST_CLAIM_WAIT s. Unavailable when it cannot be
        told: its steps, if it committed, are then redelivered when their lease expires."""
        result, xid = self.result, self.xid
        self.clear()
        waited = 0.0
        status = None
        while xid:
            try:
                cur = await conn.execute(xact_status, (xid,))
            except (pg_errors.InvalidParameterValue, pg_errors.ObjectNotInPrerequisiteState):
                break  # an id this server has not reached, or too old (a promoted standby)
            row = await cur.fetchone()
            status = row[0] if row is not None else None
            if status != "in progress" or waited >= LOST_CLAIM_WAIT:
                break
            await asyncio.sleep(0.05)
            waited += 0.05
        if status in ("committed", "aborted"):
            log.info("claim: the transaction whose COMMIT's answer was lost %s", status)
            return result if status == "committed" else None
        raise Unavailable(
            f"database connection lost while committing a claim, whose outcome could not be told "
            f"(transaction {xid or 'unknown'}: {status or 'no status'}); a step it leased is "
            "redelivered when its lease expires"
        )


class ClaimTransaction:
    """The claim's transaction (module docstring), on the store's collaborators. ``limited``: the
    store's ``limited_queues`` (kept up to date in place); ``now`` and ``rate_now``: the store's
    clocks, read at each claim (a test kit may give the store its clock after construction)."""

    def __init__(
        self,
        queries: Queries,
        load: LoadRecord,
        persist: Persist,
        limited: Mapping[str, QueueLimit],
        lock_class: int,
        now: Callable[[], int],
        rate_now: Callable[[], int | None],
    ) -> None:
        self.queries = queries
        self.load = load
        self.persist = persist
        self.limited = limited
        self.lock_class = lock_class  # the class of the concurrency limits' per-key advisory locks
        self.now = now
        self.rate_now = rate_now

    async def run(
        self,
        conn: Conn,
        queues: list[str],
        max_tasks: int,
        transition: ClaimTransition,
        reserved: dict[str, Reservation],
        unused: dict[str, int],
        one_trip: bool,
        skip: Skip = NOTHING_SKIPPED,
        attempt: ClaimAttempt | None = None,
    ) -> tuple[list[Claimed], list[tuple[str, Changes]]]:
        """Claim up to ``max_tasks`` steps of ``queues`` in one transaction: the steps claimed and,
        per instance changed, its changes. ``reserved``: the moments of fast rates reserved for
        this claim; ``unused`` is left with what the claim did not use of them. ``one_trip``: admit
        keyed rows on the read's counts, confirmed in the write statement (limits.py); a key found
        with less room raises psycopg's error of SQLSTATE ``KEY_ROOM_TAKEN``. ``skip``: the nodes
        whose steps the claim passes over (candidates.py). ``attempt``: filled with what is about
        to be committed, before the COMMIT (``ClaimAttempt``)."""
        unused.update((queue, moments.count) for queue, moments in reserved.items())  # (run again: all)
        xid: list[str] | None = None
        if attempt is not None:
            attempt.clear()
            xid = []
        async with transaction(conn) as pipeline:
            now = self.now()
            rows, tokens = await claim_candidates(
                conn, pipeline, self.queries, queues, max_tasks, now, self.rate_now(), skip, xid
            )
            if not rows:
                return [], []
            rows, tokens, admission = await self._admit_rows(
                conn, pipeline, queues, rows, tokens, max_tasks, now, one_trip, reserved
            )
            if admission is not None:  # the moments it left (its budgets, counted down)
                unused.update(admission.budgets)
            out, states = await self._claim_transitions(conn, rows, tokens, transition, now)
            check = None
            if admission is not None:  # after the transitions: they reset queue_held
                check = await admission.settle(conn, self.queries)
            existing = {t for state, _ in states.values() for t in state.tokens}
            items = [(state, changes, state.instance.context) for state, changes in states.values()]
            # the keys' room confirmed in the writes' statement, before its writes (limits.py)
            await self.persist(conn, items, existing, check)
            result = out, [(state.instance.id, changes) for state, changes in states.values()]
            if attempt is not None and xid:
                attempt.xid, attempt.result = xid[0], result
        return result

    async def _admit_rows(
        self,
        conn: Conn,
        pipeline: Any,
        queues: list[str],
        rows: list[Any],
        tokens: list[Token],
        max_tasks: int,
        now: int,
        one_trip: bool,
        reserved: dict[str, Reservation],
    ) -> tuple[list[Any], list[Token], Admission | None]:
        """The rows a claim takes of those it read, under their limits (limits.py): the rows, their
        tokens and the admission to settle (None: no limit applies). ``one_trip``: admit on the
        read's counts where only keys limit the rows (the admission confirms them when settled).
        ``reserved``: the moments of fast rates this claim spent (rate_blocks.py), per queue with
        the limit they are of; the admission's ``budgets`` are left with what it did not use."""
        # The limited queues as this node knows them now, after the rows were read, not before
        # the connection was had: a limit set through this node before a step was started always
        # applies to that step's claim (a claim that waited for its connection across a
        # set_queue_limit and the start that followed it took the step unlimited: two claims at
        # one moment under a rate).
        limits = self.limited
        limited = {queue for queue in queues if queue in limits} if limits else set()
        if not limited and not any(token.limit_key or token.rate_key for token in tokens):
            return rows[:max_tasks], tokens[:max_tasks], None
        # A queue's reserved moments serve its rows if its limit is still the one they are of
        # (else it is read under its row's lock); the admission counts them down, and what is
        # left goes back after the claim (store.py ``claim``).
        budgets = {queue: m.count for queue, m in reserved.items() if limits.get(queue) == m.limit}
        locked = limited - budgets.keys()
        admission = Admission(rows, tokens, locked & {token.queue for token in tokens}, max_tasks, budgets)
        if one_trip and Admission.keys_only(tokens, locked):
            admission.keep_on_read_counts(now, self.lock_class)
        else:
            await admission.run(conn, pipeline, self.queries, self.lock_class, now, self.rate_now())
        return admission.rows, admission.tokens, admission

    async def _claim_transitions(
        self, conn: Conn, rows: list[Any], tokens: list[Token], transition: ClaimTransition, now: int
    ) -> tuple[list[Claimed], dict[str, tuple[InstanceState, Changes]]]:
        """The claim's transition of each row taken, and the instances' states and changes."""
        out: list[Claimed] = []
        states: dict[str, tuple[InstanceState, Changes]] = {}
        for row, token in zip(rows, tokens, strict=True):
            entry = states.get(token.instance_id)
            if entry is None:
                instance = instance_from(row, N_TOKEN)
                if instance.status != InstanceStatus.RUNNING:
                    continue  # never expected (a finished instance has no READY token)
                entry = (InstanceState(instance, {}), Changes())
                states[token.instance_id] = entry
            state, changes = entry
            state.tokens[token.id] = token
            record = await self.load(conn, state.instance.workflow, state.instance.version)
            out.append(transition(record.loaded, state, token, now, changes))
        return out, states
