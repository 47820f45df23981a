"""The READY rows a PostgreSQL claim may take: the claim statements' rounds (claims.py ``ClaimTransaction``).

A claim's first round runs under the statement's generic plan, planned once per connection
(docs/postgres-plans.md#one-plan-per-claim); the further rounds look past the concurrency-limit
keys already found (docs/flow-control.md#fair-claims-across-keys). Which of the rows the claim
then takes under its limits is limits.py's ``Admission``.
"""

from __future__ import annotations

from typing import Any

from ..._engine.state import Token
from ..base import NOTHING_SKIPPED, Skip
from .codecs import token_from
from .db import Conn
from .statements import Queries

__all__ = ["CLAIM_ROUNDS", "claim_candidates"]

#: The most statements a claim runs to find its rows.
CLAIM_ROUNDS = 3


async def claim_candidates(
    conn: Conn,
    pipeline: Any,
    q: Queries,
    queues: list[str],
    max_tasks: int,
    now: int,
    rate_now: int | None,
    skip: Skip = NOTHING_SKIPPED,
    xid: list[str] | None = None,
) -> tuple[list[Any], list[Token]]:
    """The READY rows a claim may take, locked, in claim-rank order, and their tokens.

    One round takes the first ``max_tasks`` rows. Unless that many of them would be taken
    first in the fair order whatever comes after them (rows without a concurrency-limit key,
    or the first row of a key with no attempt running), or the rows found so far offer
    ``enough_keys`` keys to choose from, further rounds (up to ``CLAIM_ROUNDS`` in all, each
    taking twice as many rows as the one before) look past the keys found so far: the claim
    can then take the steps of other keys instead of one more of a busy key (limits.py), and
    is not cut short by one key's backlog ahead of the steps of keys with room
    (docs/flow-control.md#fair-claims-across-keys). The bounds keep a claim's reads and row
    locks a small multiple of what it takes, whatever the backlog.

    ``skip``: the nodes whose steps the claim passes over (wiggle/_server/unrunnable.py), in
    statements of their own, planned as the further rounds are (their arrays are the plan's).

    ``xid``, if given, is filled with the transaction's id once rows were found (their locks gave
    it one), read in the first round's round trip (claims.py ``ClaimAttempt``)."""
    one = len(queues) == 1
    extra: tuple[list[str], ...] = ()  # the skipped nodes' arrays, after each round's own parameters
    if skip:
        nodes = sorted(skip)
        extra = ([n[0] for n in nodes], [n[1] for n in nodes], [n[2] for n in nodes])
        opening, text = (
            (q.claim_one_skipping, q.claim_one_past_skipping)
            if one
            else (q.claim_many_skipping, q.claim_many_past_skipping)
        )
    else:
        opening, text = (q.claim_one_first, q.claim_one) if one else (q.claim_many_first, q.claim_many)
    queue_param: str | list[str] = queues[0] if one else list(queues)
    rows: list[Any] = []
    tokens: list[Token] = []
    keys: list[str] = []
    enough_keys = 2 * max_tasks + 8
    xid_cur = None
    for round_ in range(CLAIM_ROUNDS):
        limit = max_tasks * 2**round_
        limits = (limit,) if one else (limit, limit)
        if round_ == 0:
            if not skip:  # under its one generic plan (statements.py, _claims)
                await conn.execute(q.generic_plans)
            cur = await conn.execute(opening, (queue_param, now, rate_now, *extra, *limits), binary=True)
            if not skip:
                await conn.execute(q.default_plans)
            xid_cur = await conn.execute(q.claim_xid) if xid is not None else None
        else:
            params = (queue_param, now, rate_now, keys, [t.id for t in tokens], *extra, *limits)
            cur = await conn.execute(text, params, binary=True)
        await pipeline.sync()
        found = await cur.fetchall()
        if xid_cur is not None and xid is not None:
            row = await xid_cur.fetchone()
            if row is not None and row[0]:
                xid.append(row[0])
            xid_cur = None
        rows.extend(found)
        tokens.extend(token_from(row) for row in found)
        idle = {t.limit_key for t, row in zip(tokens, rows, strict=True) if t.limit_key and not row[-1]}
        settled = len(idle) + sum(1 for t in tokens if not t.limit_key)  # taken first whatever follows
        keys = sorted({t.limit_key for t in tokens if t.limit_key})
        if len(found) < limit or settled >= max_tasks or len(keys) >= enough_keys:
            break  # nothing further, enough that nothing further would come before, or choice enough
    return rows, tokens
