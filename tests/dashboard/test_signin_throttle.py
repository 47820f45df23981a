"""Failed dashboard sign-ins are throttled per address (wiggle/_server/web/throttle.py): found by
an outside trial, 300 wrong tokens went through in 0.17 s, each logged at WARNING."""

from __future__ import annotations

import logging

import pytest
from clocks import ManualClock
from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)

from wiggle._server.web.errors import HttpProblem
from wiggle._server.web.throttle import MAX_FAILURES, WINDOW_SECONDS, SignInThrottle

from .helpers import call, secured_server, tls_client


def test_an_address_waits_after_too_many_failures_and_others_do_not() -> None:
    clock = ManualClock(100.0)
    throttle = SignInThrottle(clock)
    reached = [throttle.failed("10.0.0.1") for _ in range(MAX_FAILURES)]
    assert reached == [False] * (MAX_FAILURES - 1) + [True]  # logged once, at the limit
    clock.at += 10
    with pytest.raises(HttpProblem) as waits:
        throttle.check("10.0.0.1")
    assert waits.value.status == 429 and f"try again in {int(WINDOW_SECONDS) - 10} s" in str(waits.value)
    throttle.check("10.0.0.2")  # another address signs in as ever
    clock.at += WINDOW_SECONDS - 10  # the failures are a window old
    throttle.check("10.0.0.1")
    assert not throttle._failures  # nothing kept of them


async def test_the_sign_in_page_answers_429_past_the_limit_even_for_the_right_token(
    pki: Pki,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.http")
    async with secured_server("memory", "", "", pki) as (_, base):
        tls = tls_client(pki)
        for _ in range(MAX_FAILURES):
            status, _, answer = await call(
                "POST", f"{base}/signin", tls, {"token": "tok-guess"}, {"Origin": base}
            )
            assert status == 401 and "not known" in answer["error"], answer
        for token in ("tok-guess", "tok-app"):
            status, headers, answer = await call(
                "POST", f"{base}/signin", tls, {"token": token}, {"Origin": base}
            )
            assert status == 429, answer
            assert (
                answer["code"] == "RESOURCE_EXHAUSTED"
                and "failed sign-ins from this address" in answer["error"]
            )
            assert "Set-Cookie" not in headers
    refused = [r.getMessage() for r in caplog.records if "sign-in refused" in r.getMessage()]
    assert len(refused) == MAX_FAILURES and "its sign-ins wait" in refused[-1], refused
