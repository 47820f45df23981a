"""Blocks of a fast queue rate (wiggle/_storage/postgres/rate_blocks.py; docs/flow-control.md#queue-limits).

The arithmetic of a block (which moments are due, which are lost), the rule it keeps checked
against a model of several servers taking blocks from one rate row and spending them at random
moments: any window of the period holds at most ``rate_max * (1 + LATE_SHARE) + 1`` claims. Two
servers draining a queue under such a rate on PostgreSQL: tests/conformance/test_queue_limits.py.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from wiggle._storage.postgres.rate_blocks import BLOCK_MAX, LATE_SHARE, Block, block_size
from wiggle._storage.queue_limits import QueueLimit, _tolerance


def rate(rate_max: int, period_millis: int = 1000, max_running: int = 0) -> QueueLimit:
    return QueueLimit(queue="q", max_running=max_running, rate_max=rate_max, rate_period_millis=period_millis)


def test_only_fast_rates_without_max_running_come_in_blocks() -> None:
    assert block_size(rate(799)) == 0  # under 8 moments in LATE_SHARE of the period
    assert block_size(rate(800)) == 8
    assert block_size(rate(5_000, 10_000)) == 50
    assert block_size(rate(1_000_000)) == BLOCK_MAX
    assert block_size(rate(1_000_000, max_running=4)) == 0  # its RUNNING count is read under the lock
    assert block_size(rate(0)) == 0


def test_a_blocks_moments_are_due_in_turn_and_lost_when_late() -> None:
    block = Block(rate(1000), first=1000.0, count=10)  # moments 1000, 1001, ... 1009; late after 10 ms
    assert block.due(999) == 0
    assert block.due(1000) == 1
    assert block.due(1004) == 5
    assert block.spend(3, 1004) == 3 and block.due(1004) == 2
    assert block.due(1012) == 7  # 1000 and 1001 are more than 10 ms behind: lost (not spent: 3 were)
    assert block.due(1015) == 5  # 1000..1004 lost
    assert not block.done(1015)
    assert block.spend(99, 1015) == 5 and block.done(1015) and block.due(1015) == 0


def test_a_sub_millisecond_rate_is_due_a_millisecond_ahead() -> None:
    block = Block(rate(1_000_000), first=1000.0, count=256)  # 256 moments within 0.256 ms
    assert block.due(1000) == 256  # the rate's tolerance: the rest of the millisecond
    assert block.due(1011) == 0 and block.done(1011)  # all more than 10 ms behind


def take_block(row: list[float], limit: QueueLimit, now: int) -> Block | None:
    """The statement ``take_rate_block`` (wiggle/_storage/postgres/statements.py), in Python."""
    interval = limit.rate_period_millis / limit.rate_max
    start = max(row[0], float(now))
    if start > now + _tolerance(interval) + 1e-6:
        return None
    size = block_size(limit)
    row[0] = start + size * interval
    return Block(limit, start, size)


def simulate(limit: QueueLimit, demands: list[tuple[int, int, int]], servers: int = 3) -> list[int]:
    """The claims' moments when servers ask for (server, at, want) claims in turn, each taking a
    block when its own have few moments due (as RateBlocks.fill) and spending what is due, oldest
    block first (as RateBlocks.spend)."""
    row = [0.0]  # the rate's row: its next moment
    blocks: dict[int, list[Block]] = {n: [] for n in range(servers)}
    claims: list[int] = []
    for server, at, want in sorted(demands, key=lambda d: d[1]):
        mine = [b for b in blocks[server] if not b.done(at)]
        if sum(b.due(at) for b in mine) < min(want, block_size(limit) // 2 + 1):
            block = take_block(row, limit, at)
            if block is not None:
                mine.append(block)
        blocks[server] = mine
        took = 0
        for block in mine:
            took += block.spend(want - took, at)
        claims.extend([at] * took)
    return sorted(claims)


def most_in_a_window(claims: list[int], period: int) -> int:
    """The most claims in any window [at, at + period) that starts at a claim."""
    most, j = 0, 0
    for i, at in enumerate(claims):
        while j < len(claims) and claims[j] < at + period:
            j += 1
        most = max(most, j - i)
    return most


def bound(limit: QueueLimit) -> int:
    return math.floor(limit.rate_max * (1 + LATE_SHARE)) + 1


@settings(max_examples=60, deadline=None)
@given(
    rate_max=st.sampled_from([800, 1000, 2500, 10_000]),
    period=st.sampled_from([100, 1000, 4000]),
    demands=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 20_000), st.integers(1, 64)), min_size=1, max_size=400
    ),
)
def test_servers_spending_blocks_never_pass_the_rate_by_more_than_the_late_share(
    rate_max: int, period: int, demands: list[tuple[int, int, int]]
) -> None:
    """Three servers, claims of random sizes at random moments (ms): any window of the period
    holds at most rate_max * (1 + LATE_SHARE) + 1 claims."""
    limit = rate(rate_max, period)
    assert most_in_a_window(simulate(limit, demands), period) <= bound(limit)


def test_moments_kept_past_their_lateness_would_pass_the_rate() -> None:
    """Three servers each take a block and spend one moment of it, a fourth then uses the whole
    rate for a second, and the three ask for more at its end: their old moments are lost, so the
    second holds no more than the bound (kept, they would add 27 claims to it)."""
    limit = rate(1000)  # blocks of 10 moments 1 ms apart
    hoard = [(0, 0, 1), (1, 10, 1), (2, 20, 1)]
    steady = [(3, at, 1) for at in range(30, 1030)]
    burst = [(server, 1029, 64) for server in range(3)]
    claims = simulate(limit, hoard + steady + burst, servers=4)
    assert most_in_a_window(claims, 1000) <= bound(limit)
