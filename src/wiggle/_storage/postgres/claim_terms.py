"""The SQL terms a claim ranks and filters READY tokens by: its rank, and the concurrency and
rate limits of a token ``t`` (rendered into the store's statements, statements.py, and the queue
counts, ops.py). ``{s}`` stands for the schema, filled in where a statement is rendered."""

from __future__ import annotations

from ..._engine.start_options import PRIORITY_AGING_MILLIS

__all__ = [
    "DB_NOW_MILLIS",
    "KEY_RUNNING",
    "RANK",
    "RATE_NOW",
    "RATE_OPEN",
    "UNDER_LIMIT",
    "key_held",
    "rate_open",
]

#: A token's claim rank (start_options.claim_rank), exactly as the tokens_claim index spells it.
RANK = f"(t.available_at - t.priority * {PRIORITY_AGING_MILLIS})"


def key_held(key: str) -> str:
    """How many attempts of the concurrency-limit key ``key`` (an SQL expression: a column, a
    parameter) run now, through migration 0014's partial index tokens_limit_held.

    ``h.limit_key <> ''`` is that index's own condition, written out: PostgreSQL uses a partial
    index only for a query that implies its condition, and ``limit_key = t.limit_key`` (or a
    parameter, under a generic plan) does not imply ``limit_key <> ''``. Without it every count
    scanned all RUNNING tokens: on 4,000 of them a claim of 16 keyed steps took 12 ms instead of
    0.08 (bench/README.md, "Round thirteen"; tests/storage/test_key_count_plans.py)."""
    return (
        "(SELECT count(*) FROM {s}.tokens h WHERE h.status = 'RUNNING' AND h.limit_key <> '' "
        f"AND h.limit_key = {key})"
    )


#: A READY token ``t`` its claim may take as far as concurrency limits go: no limit key, or fewer
#: than its ``limit_max`` RUNNING tokens of its key (migration 0014's tokens_limit_held). An
#: unlimited token stops at the first test (OR is evaluated left to right, and stops at true).
UNDER_LIMIT = f"(t.limit_key = '' OR {key_held('t.limit_key')} < t.limit_max)"

#: The database's clock in epoch milliseconds: the clock of per-key rates (docs/flow-control.md#per-key-rate-limits)
#: on the wall clock, so that every server's claims count one key's rate alike.
DB_NOW_MILLIS = "(extract(epoch FROM clock_timestamp()) * 1000)"

#: The rates' clock in epoch milliseconds: the parameter (a test kit's virtual clock), or
#: without one the database's.
RATE_NOW = f"COALESCE(%s::float8, {DB_NOW_MILLIS})"


def rate_open(now: str) -> str:
    """A READY token ``t`` whose key's rate may admit a claim at ``now`` (an SQL expression, ms):
    no rate key, or no ``rate_keys`` moment more than a millisecond ahead (the claim decides
    exactly, under the key's lock: limits.py)."""
    return (
        "(t.rate_key = '' OR NOT EXISTS (SELECT 1 FROM {s}.rate_keys r WHERE r.key = t.rate_key "
        f"AND r.tat > {now} + 1))"
    )


#: ``rate_open`` at the rates' clock (``RATE_NOW``).
RATE_OPEN = rate_open(RATE_NOW)

#: How many attempts of a READY token ``t``'s concurrency-limit key run now (0 without a key).
KEY_RUNNING = f"(CASE WHEN t.limit_key = '' THEN 0 ELSE {key_held('t.limit_key')} END)"
