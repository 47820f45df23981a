"""The poller table behind the Queues page (src/wiggle/_server/pollers.py)."""

from __future__ import annotations

from wiggle._limits import MAX_POLL_QUEUES
from wiggle._server.pollers import Pollers


def test_a_worker_polling_other_queues_of_the_same_count_is_listed_under_each() -> None:
    clock = iter(range(1_000, 2_000)).__next__
    pollers = Pollers(now=clock)
    pollers.seen("w1", ["a", "b"])
    pollers.seen("w1", ["c", "d"])  # the same number of queues, other names
    pollers.seen("w1", ["b"])
    (only,) = pollers.snapshot()
    assert only.queues == ["a", "b", "c", "d"]
    assert only.polls == 3 and only.first_seen == 1_000 and only.last_seen == 1_002


def test_the_queues_kept_for_a_worker_are_bounded_like_one_poll() -> None:
    """A worker that keeps polling new queues (each poll within MAX_POLL_QUEUES) is listed under
    its latest poll's queues once the union would pass the limit, not under every name it sent."""
    clock = iter(range(1_000, 2_000)).__next__
    pollers = Pollers(now=clock)
    first = [f"a{i}" for i in range(MAX_POLL_QUEUES)]
    second = [f"b{i}" for i in range(MAX_POLL_QUEUES - 1)]
    pollers.seen("w1", first)
    pollers.seen("w1", second)
    (only,) = pollers.snapshot()
    assert only.queues == sorted(second)
    pollers.seen("w1", ["a0"])  # within the limit: added as before
    (only,) = pollers.snapshot()
    assert only.queues == sorted([*second, "a0"])
