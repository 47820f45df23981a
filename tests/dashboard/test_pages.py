"""The dashboard's pages rendered from API-shaped data, without a server: what each page shows for
the states an operator meets (a lagging queue, a signal wait, a retrying step ...)."""

from __future__ import annotations

import msgspec
import pytest

from wiggle._server.web import pages
from wiggle.errors import InvalidArgument


def queue(name: str, lagging: bool) -> dict[str, object]:
    return {
        "queue": name,
        "ready": 3,
        "delayed": 0,
        "oldest_ready_age_ms": 95_000,
        "running": 0,
        "in_local_run": 0,
        "lag": {"lagging": lagging, "rate_per_second": 1.5},
        "schedule_to_start": None,
        "workers": [],
        "limit_held": 0,
        "limit_waiting": 0,
        "max_running": 0,
        "rate_max": 0,
        "rate_period_millis": 0,
        "rate_limited_until": 0,
        "rate_waiting": 0,
        "rate_waiting_until": 0,
    }


def test_a_lagging_queue_is_highlighted_once_in_one_class_attribute() -> None:
    html = pages.queues_html({"now": 0, "queues": [queue("slow", True), queue("fine", False)]})
    slow, fine = html.split('data-queue="slow"')[1].split('data-queue="fine"')
    assert '<td class="num oldest err lagging">' in slow
    assert '<td class="num oldest">' in fine and "lagging" not in fine
    for row in (slow, fine):  # one class attribute per cell: a second one is ignored by browsers
        assert all(cell.count("class=") <= 1 for cell in row.split("<td")[1:])


def test_a_queues_limits_and_key_slots_read_as_words() -> None:
    now = 1_764_684_000_000  # 2025-12-02 14:00:00 UTC
    limited = {
        **queue("limited", False),
        "running": 3,
        "max_running": 20,
        "rate_max": 50,
        "rate_period_millis": 1000,
        "rate_limited_until": now + 2_000,
        "limit_held": 2,
        "limit_waiting": 5,
    }
    per_hour = {**queue("hourly", False), "rate_max": 600, "rate_period_millis": 3_600_000}
    odd = {**queue("odd", False), "rate_max": 3, "rate_period_millis": 1_500}
    html = pages.queues_html({"now": now, "queues": [limited, per_hour, odd, queue("free", False)]})
    cells = {
        row.split('"')[0]: row.split('<td class="limits">')[1].split("</td>")[:2]
        for row in html.split('data-queue="')[1:]
    }
    limits, slots = cells["limited"]
    assert limits == (
        'max running 20 <span class="muted">(3 in use)</span><br>rate 50 / 1 s<br>'
        f'<span class="err rate-limited">rate limited until <time data-ms="{now + 2_000}" '
        'datetime="2025-12-02T14:00:02Z">2025-12-02 14:00:02Z</time></span> <span class="muted">(in 2 s)</span>'
    )
    assert slots == '<td class="slots">2 held<br>5 waiting'
    assert cells["hourly"] == ["rate 600 / 1 h", '<td class="slots">-']
    assert cells["odd"][0] == "rate 3 / 1500 ms"
    assert cells["free"] == ["—", '<td class="slots">-']


def test_steps_waiting_for_their_keys_rate_read_as_words() -> None:
    now = 1_764_684_000_000  # 2025-12-02 14:00:00 UTC
    keyed = {**queue("keyed", False), "rate_waiting": 3, "rate_waiting_until": now + 2_000}
    html = pages.queues_html({"now": now, "queues": [keyed]})
    limits = html.split('<td class="limits">')[1].split("</td>")[0]
    assert limits == (
        f'<span class="key-rate">3 waiting for their key\'s rate, the next at <time data-ms="{now + 2_000}" '
        'datetime="2025-12-02T14:00:02Z">2025-12-02 14:00:02Z</time></span> <span class="muted">(in 2 s)</span>'
    )


def test_every_waiting_token_says_until_when() -> None:
    from wiggle._engine.state import Token, TokenStatus
    from wiggle._model import NodeKind
    from wiggle._server.web.states import node_states, token_times
    from wiggle._wire.convert import token_to_pb
    from wiggle._wire.replies import token_from_pb

    now = 1_000_000_000_000
    sleeping = Token("t1", "i", "nap", TokenStatus.WAITING, available_at=now + 240_000)
    retrying = Token("t2", "i", "charge", TokenStatus.READY, attempt=3, available_at=now + 30_000)
    running = Token(
        "t3",
        "i",
        "ship",
        TokenStatus.RUNNING,
        lease_owner="w1",
        deadline_at=now + 90_000,
        lease_expires_at=now + 20_000,
    )
    person = Token("t4", "i", "approve", TokenStatus.AWAITING, available_at=now + 7_200_000)
    starting = Token("t5", "i", "pack", TokenStatus.READY, deadline_at=now + 5_000)
    assert token_times(sleeping, NodeKind.SLEEP, now) == [{"what": "wakes at", "at": now + 240_000}]
    assert token_times(retrying, NodeKind.TASK, now) == [{"what": "next attempt at", "at": now + 30_000}]
    assert token_times(running, NodeKind.TASK, now) == [
        {"what": "times out at", "at": now + 90_000},
        {"what": "lease until", "at": now + 20_000},
    ]
    assert token_times(person, NodeKind.USER_TASK, now) == [{"what": "deadline", "at": now + 7_200_000}]
    assert token_times(starting, NodeKind.TASK, now) == [{"what": "must start by", "at": now + 5_000}]
    states, labels = node_states([], [sleeping, retrying, running, person, starting], None, now)
    assert states == {
        "nap": "sleeping",
        "charge": "retrying",
        "ship": "running",
        "approve": "awaiting",
        "pack": "ready",
    }
    assert labels["nap"] == "sleeping, wakes in 4 min"
    assert labels["charge"] == "attempt 3 in 30 s"
    assert labels["ship"] == "running on w1 (attempt 1), times out in 1 min"
    assert labels["approve"] == "awaiting a person, deadline in 2.0 h"
    shown = msgspec.to_builtins(token_from_pb(token_to_pb(running)))  # the read model's token
    html = pages._tokens_html([{**shown, "times": token_times(running, None, now)}], now)
    assert f'times out at <time data-ms="{now + 90_000}"' in html and "(in 1 min)" in html


def test_time_filters_as_a_person_writes_them() -> None:
    from wiggle._server.web.times import iso, time_arg

    now = 1_764_684_000_000  # 2025-12-02 14:00:00 UTC
    assert time_arg("", "t", now) == 0
    assert time_arg("1764684000000", "t", now) == now
    assert time_arg("2h", "t", now) == now - 7_200_000
    assert time_arg("15m ago", "t", now) == now - 900_000
    assert time_arg("2025-12-02 14:00", "t", now) == now  # no offset: UTC
    assert time_arg("2025-12-02T15:00:00+01:00", "t", now) == now
    assert time_arg("2025-12-02T14:00:00Z", "t", now) == now
    assert iso(now) == "2025-12-02T14:00:00Z" and iso(now + 5) == "2025-12-02T14:00:00.005Z"
    with pytest.raises(InvalidArgument, match="t must be a date and time"):
        time_arg("yesterday", "t", now)
    # the latest a filter can name is the latest a page can show back: 9999-12-31 UTC
    assert iso(time_arg("253402300799999", "t", now)) == "9999-12-31T23:59:59.999Z"
    for late in ("253402300800000", "9" * 5000, "9999-12-31T23:30:00-01:00"):
        with pytest.raises(InvalidArgument, match=r"t must be from 1970-01-01 to 9999-12-31 UTC"):
            time_arg(late, "t", now)
    with pytest.raises(InvalidArgument, match="t must be from 1970-01-01"):
        time_arg("1969-12-31", "t", now)


def test_context_search_fields_are_checked_and_listed_once() -> None:
    from wiggle._server.config import context_fields, from_mapping
    from wiggle._storage.postgres.context_indexes import index_name

    config = from_mapping({}, env={"WIGGLE_CONTEXT_SEARCH_FIELDS": " customer_id, order_id ,customer_id,"})
    assert context_fields(config) == ("customer_id", "order_id")
    with pytest.raises(InvalidArgument, match="--context-search-fields .* names 'customer-id'"):
        from_mapping({"context_search_fields": "customer-id"}, env={})
    assert index_name("customer_id") == "instances_ctx_customer_id"
    long_a, long_b = index_name("x" * 60 + "a"), index_name("x" * 60 + "b")
    assert len(long_a) == len(long_b) == 63 and long_a != long_b  # cut, and kept apart by a digest
