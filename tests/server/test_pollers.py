"""The poller table behind the Queues page (src/wiggle/_server/pollers.py)."""

from __future__ import annotations

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
