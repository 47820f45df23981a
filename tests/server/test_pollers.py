"""The poller table behind the Queues page (src/wiggle/_server/pollers.py)."""

from __future__ import annotations

from clocks import ManualClock

from wiggle._limits import MAX_POLL_QUEUES
from wiggle._server.pollers import FORGET_AFTER_MILLIS, MAX_POLLERS, Pollers


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


def test_a_new_id_each_poll_keeps_the_list_bounded_and_drops_the_one_seen_longest_ago() -> None:
    """A credential polling with a new worker id each time (found by an outside trial: 50,000
    polls on one stream) once made every new id past 10,000 scan the whole list, and the list
    kept every fresh id. Now it holds MAX_POLLERS, the one seen longest ago going first."""
    clock = ManualClock(1_000_000)
    pollers = Pollers(now=clock)
    pollers.seen("real-worker", ["orders"])
    for i in range(MAX_POLLERS - 1):
        pollers.seen(f"flood-{i}", ["orders"])
    pollers.seen("real-worker", ["orders"])  # seen again: now the most recent
    for i in range(MAX_POLLERS - 1, 5 * MAX_POLLERS):
        clock.at += 1
        pollers.seen(f"flood-{i}", ["orders"])
        if i % 10_000 == 0:
            pollers.seen("real-worker", ["orders"])
    listed = {p.worker_id for p in pollers.snapshot()}
    assert len(listed) == MAX_POLLERS
    assert "real-worker" in listed and "flood-0" not in listed and f"flood-{5 * MAX_POLLERS - 1}" in listed


def test_workers_not_seen_for_a_while_are_dropped_in_the_order_they_were_last_seen() -> None:
    clock = ManualClock(1_000_000)
    pollers = Pollers(now=clock)
    for name in ("a", "b", "c"):
        pollers.seen(name, ["q"])
        clock.at += 1_000
    pollers.seen("a", ["q"])  # a is the most recent now
    clock.at += FORGET_AFTER_MILLIS - 500  # b (seen 2,000 ms before a) is gone; c, 1,000 ms, too
    assert [p.worker_id for p in pollers.snapshot()] == ["a"]
