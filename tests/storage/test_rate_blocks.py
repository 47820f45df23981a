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

from wiggle._storage.postgres.rate_blocks import (
    BLOCK_MAX,
    BLOCK_MIN,
    LATE_SHARE,
    Block,
    RateBlocks,
    block_size,
)
from wiggle._storage.queue_limits import QueueLimit, _tolerance


def rate(rate_max: int, period_millis: int = 1000, max_running: int = 0) -> QueueLimit:
    return QueueLimit(queue="q", max_running=max_running, rate_max=rate_max, rate_period_millis=period_millis)


def test_only_fast_rates_without_max_running_come_in_blocks() -> None:
    assert LATE_SHARE == 0.05  # the figures below
    assert block_size(rate(159)) == 0  # under 8 moments in LATE_SHARE of the period
    assert block_size(rate(160)) == 8
    assert block_size(rate(5_000, 10_000)) == 250
    assert block_size(rate(1_000_000)) == BLOCK_MAX
    assert block_size(rate(1_000_000, max_running=4)) == 0  # its RUNNING count is read under the lock
    assert block_size(rate(0)) == 0


def test_a_blocks_moments_are_due_in_turn_and_lost_when_late() -> None:
    block = Block(rate(1000), first=1000.0, count=10)  # moments 1000, 1001, ... 1009; late after 50 ms
    assert block.due(999) == 0
    assert block.due(1000) == 1
    assert block.due(1004) == 5
    assert block.spend(3, 1004) == 3 and block.due(1004) == 2
    assert block.due(1052) == 7  # 1000 and 1001 are more than 50 ms behind: lost (not spent: 3 were)
    assert block.due(1055) == 5  # 1000..1004 lost
    assert not block.done(1055)
    assert block.spend(99, 1055) == 5 and block.done(1055) and block.due(1055) == 0


def test_a_servers_blocks_follow_its_demand() -> None:
    """Blocks sized by what the server spends per millisecond, for twice the lateness allowed (50
    ms of a 1 s period): a steady 4 a millisecond takes blocks of about 400, and what the blocks
    held stays within about twice what was spent."""
    blocks = RateBlocks(None, None)  # type: ignore[arg-type]  # no IO here
    limit = rate(1_000_000)
    assert blocks.next_size(limit, 0) == BLOCK_MIN  # nothing spent yet
    sizes = []
    spent = 0
    for now in range(0, 1000):
        for wanted in blocks.wanted([limit], 4, now):
            sizes.append(blocks.next_size(wanted, now))
            blocks.took(wanted, float(now), sizes[-1], now)
        spent += blocks.spend("q", 4, now)
    assert spent >= 4 * 990, spent  # short only while the first blocks were small
    assert 300 <= sizes[-1] <= 500 and max(sizes) <= 500, sizes
    assert sum(sizes) <= 2.5 * spent, (sum(sizes), spent)


def test_a_sub_millisecond_rate_is_due_a_millisecond_ahead() -> None:
    block = Block(rate(1_000_000), first=1000.0, count=256)  # 256 moments within 0.256 ms
    assert block.due(1000) == 256  # the rate's tolerance: the rest of the millisecond
    assert block.due(1051) == 0 and block.done(1051)  # all more than 50 ms behind


def take_block(row: list[float], limit: QueueLimit, size: int, now: int) -> float | None:
    """The statement ``take_rate_block`` (wiggle/_storage/postgres/statements.py), in Python:
    the block's first moment, or None if the rate's next moment is not due."""
    interval = limit.rate_period_millis / limit.rate_max
    start = max(row[0], float(now))
    if start > now + _tolerance(interval) + 1e-6:
        return None
    row[0] = start + size * interval
    return start


def simulate(limit: QueueLimit, demands: list[tuple[int, ...]], servers: int = 3) -> list[int]:
    """The claims' moments when servers ask for (server, at, want[, rows]) claims in turn: each
    server's RateBlocks decides when to take a block and of what size, the model of the statement
    gives it, the claim reserves up to ``want`` of what is due, uses as many as it has rows (all
    if not given) and gives the rest back (as PostgresStore.claim)."""
    row = [0.0]  # the rate's row: its next moment
    nodes = {n: RateBlocks(None, None) for n in range(servers)}  # type: ignore[arg-type]  # no IO here
    claims: list[int] = []
    for server, at, want, *rows in sorted(demands, key=lambda d: d[1]):
        blocks = nodes[server]
        for wanted in blocks.wanted([limit], want, at):
            size = blocks.next_size(wanted, at, want)
            blocks.took(wanted, take_block(row, wanted, size, at), size, at)
        reservation = blocks.reserve_now(limit, want, at)
        used = min(reservation.count, *rows) if rows else reservation.count
        blocks.give_back(reservation, reservation.count - used)
        claims.extend([at] * used)
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
        st.tuples(st.integers(0, 2), st.integers(0, 20_000), st.integers(1, 64), st.integers(0, 64)),
        min_size=1,
        max_size=400,
    ),
)
def test_servers_spending_blocks_never_pass_the_rate_by_more_than_the_late_share(
    rate_max: int, period: int, demands: list[tuple[int, int, int, int]]
) -> None:
    """Three servers, claims of random sizes at random moments (ms), each with a random number of
    rows to use its moments on (the rest given back): any window of the period holds at most
    rate_max * (1 + LATE_SHARE) + 1 claims."""
    limit = rate(rate_max, period)
    assert most_in_a_window(simulate(limit, demands), period) <= bound(limit)


def test_moments_kept_past_their_lateness_would_pass_the_rate() -> None:
    """Ten servers each take a block and spend one moment of it, an eleventh then uses the whole
    rate for a second, and the ten ask for more at its end: their old moments are lost, so that
    second holds no more than the bound (kept, they would add 70 claims to it: 1,070 > 1,051)."""
    limit = rate(1000)  # moments 1 ms apart; blocks of at least 8
    hoard = [(server, 8 * server, 1) for server in range(10)]  # each at its block's first moment
    steady = [(10, at, 1) for at in range(80, 1080)]
    burst = [(server, 1079, 64) for server in range(10)]
    claims = simulate(limit, hoard + steady + burst, servers=11)
    assert most_in_a_window(claims, 1000) <= bound(limit)


def test_moments_given_back_are_spent_again_until_they_are_late() -> None:
    """A claim reserves 10 moments and uses 4: the other 6 are due again, to any claim of this
    server, and lost like any other once more than LATE_SHARE of the period behind."""
    blocks = RateBlocks(None, None)  # type: ignore[arg-type]  # no IO here
    limit = rate(1000)  # moments 1 ms apart, late after 50 ms
    blocks.took(limit, 1000.0, 20, 1000)
    first = blocks.reserve_now(limit, 10, 1010)
    assert first.count == 10 and blocks.due("q", limit, 1010) == 1
    blocks.give_back(first, 6)
    assert blocks.due("q", limit, 1010) == 7
    second = blocks.reserve_now(limit, 99, 1010)
    assert second.count == 7
    blocks.give_back(second, 3)
    # at 1066 every moment before 1016 is late: the 3 given back (1008-1010) are lost with them,
    # and only 1016-1019 are due
    assert blocks.due("q", limit, 1066) == 4


def test_a_claim_gives_back_only_moments_no_later_claim_has_passed() -> None:
    """Two claims reserve from one block, the first gives back after the second reserved: its
    moments are not the block's next ones any more, and giving them back would count the second
    claim's claims against earlier moments than it reserved: they are lost instead."""
    blocks = RateBlocks(None, None)  # type: ignore[arg-type]  # no IO here
    limit = rate(1000)
    blocks.took(limit, 1000.0, 20, 1000)
    first, second = blocks.reserve_now(limit, 5, 1010), blocks.reserve_now(limit, 5, 1010)
    blocks.give_back(first, 5)
    assert blocks.due("q", limit, 1010) == 1  # 1010 alone: 1000-1009 spent (or lost)
    blocks.give_back(second, 2)  # the newest: returned
    assert blocks.due("q", limit, 1010) == 3


def test_a_block_for_a_claim_holds_what_the_claim_asks() -> None:
    """The first block of a drain holds the claim's 16 moments, not BLOCK_MIN (it cut the first
    claims to 8: bench/README.md, "Round fourteen"), up to the rate's block size."""
    blocks = RateBlocks(None, None)  # type: ignore[arg-type]  # no IO here
    assert blocks.next_size(rate(1_000_000), 0, 16) == 16
    assert blocks.next_size(rate(1_000_000), 0) == BLOCK_MIN
    assert blocks.next_size(rate(200), 0, 64) == block_size(rate(200)) == 10
