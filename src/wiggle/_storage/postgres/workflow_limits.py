"""Admissions of workflow-level concurrency keys on PostgreSQL (docs/flow-control.md#workflow-concurrency).

One admission (``Store.admit``) is one transaction:

1. ``pg_advisory_xact_lock(class, hashtext(workflow || key))``: the admissions of one key, on any
   server, take turns (a hash collision only makes two keys take turns too);
2. the ids of the key's RUNNING instances and of its oldest waiting ones (instances_conc,
   migration 0016), read after the lock was granted (READ COMMITTED: every admission committed
   before is seen);
3. those instances locked (``FOR UPDATE``, in id order, as a group commit locks them: no
   deadlock) and loaded with their active tokens, and their status checked again;
4. the instance layer's action decides and transitions them (wiggle/_engine/workflow_limits.py);
   what it changed is written by the store's one writer (writes.py), then COMMIT.

An instance becomes RUNNING under its key's lock only, so the RUNNING count read in step 2 can
only have fallen by the commit: two admissions never both fill one free slot. The lock is taken
before any row lock and only admissions take it, so it adds no lock cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import sql

from ..._engine.state import Changes, InstanceState, InstanceStatus
from ..base import ADMIT_BATCH, AdmitAction, WorkflowRecord
from .codecs import instance_from, token_from, token_seq
from .db import Conn, transaction
from .group_commit import Items, send_locked_read
from .statements import Queries

__all__ = ["ConcQueries", "admission"]


class ConcQueries:
    """The statements of an admission, rendered once with the schema quoted."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema).as_string()
        self.lock_key = "SELECT pg_advisory_xact_lock(%s, hashtext(%s || '/' || %s))"
        where = f"FROM {s}.instances WHERE workflow = %s AND conc_key = %s AND conc_key <> '' "
        self.live = f"SELECT id {where}AND status = 'RUNNING'"
        self.waiting = (
            f"SELECT id {where}AND status = 'SCHEDULED' AND conc_since > 0 ORDER BY conc_since, id LIMIT %s"
        )
        self.waiting_per_workflow = (
            f"SELECT workflow, count(*) FROM {s}.instances "
            "WHERE conc_key <> '' AND status = 'SCHEDULED' AND conc_since > 0 GROUP BY workflow"
        )
        # Keys with a waiting instance and, by its version's max, a free slot: the ones an
        # admission would move (a key at its limit waits on its live instances' finishes).
        self.waiting_keys = (
            f"SELECT DISTINCT w.workflow, w.conc_key FROM (SELECT DISTINCT workflow, conc_key, conc_max "
            f"FROM {s}.instances WHERE conc_key <> '' AND status = 'SCHEDULED' AND conc_since > 0) w "
            f"WHERE (SELECT count(*) FROM {s}.instances r WHERE r.workflow = w.workflow "
            "AND r.conc_key = w.conc_key AND r.conc_key <> '' AND r.status = 'RUNNING') < w.conc_max "
            "ORDER BY 1, 2 LIMIT %s"
        )


LoadRecord = Callable[[Conn, str, str], Awaitable[WorkflowRecord]]
Persist = Callable[[Conn, Items, "set[str] | frozenset[str]"], Awaitable[bool]]


async def admission(
    conn: Conn,
    queries: Queries,
    conc: ConcQueries,
    lock_class: int,
    args: tuple[str, str, AdmitAction, Callable[[], int]],
    load: LoadRecord,
    persist: Persist,
) -> list[tuple[InstanceState, Changes]]:
    """One admission's transaction on ``conn`` (the module docstring); ``args`` is (workflow, key,
    action, clock). Its time is read once the lock is held: later than any finish it sees."""
    workflow, key, action, clock = args
    async with transaction(conn) as pipeline:
        await conn.execute(conc.lock_key, (lock_class, workflow, key))
        live_cur = await conn.execute(conc.live, (workflow, key))
        wait_cur = await conn.execute(conc.waiting, (workflow, key, ADMIT_BATCH))
        await pipeline.sync()
        live_ids = [r[0] for r in await live_cur.fetchall()]
        wait_ids = [r[0] for r in await wait_cur.fetchall()]
        if not wait_ids:
            return []
        ids = sorted({*live_ids, *wait_ids})
        cur_i, cur_t = await send_locked_read(conn, queries, ids)
        await pipeline.sync()
        states = {inst.id: InstanceState(inst, {}) for inst in map(instance_from, await cur_i.fetchall())}
        for token in sorted((token_from(r) for r in await cur_t.fetchall()), key=token_seq):
            if token.instance_id in states:
                states[token.instance_id].tokens[token.id] = token
        existing = {token_id for st in states.values() for token_id in st.tokens}
        originals = {iid: st.instance.context for iid, st in states.items()}
        live = await _loaded(conn, load, states, live_ids, InstanceStatus.RUNNING)
        live.sort(key=lambda ls: (ls[1].instance.created_at, ls[1].instance.id))
        waiting = await _loaded(conn, load, states, wait_ids, InstanceStatus.SCHEDULED)
        changed = action(live, waiting, clock())
        if changed:
            await persist(conn, [(st, ch, originals[st.instance.id]) for st, ch in changed], existing)
    return changed


async def _loaded(
    conn: Conn, load: LoadRecord, states: dict[str, InstanceState], ids: list[str], status: str
) -> list[tuple[Any, InstanceState]]:
    """The states of ``ids`` still of ``status`` (read again under their locks), with definitions."""
    out: list[tuple[Any, InstanceState]] = []
    for iid in ids:
        state = states.get(iid)
        if state is None or state.instance.status != status:
            continue
        if status == InstanceStatus.SCHEDULED and not state.instance.conc_since:
            continue
        record = await load(conn, state.instance.workflow, state.instance.version)
        out.append((record.loaded, state))
    return out
