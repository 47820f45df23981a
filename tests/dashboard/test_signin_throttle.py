"""Failed dashboard sign-ins are throttled per address (wiggle/_server/web/throttle.py): found by
an outside trial, 300 wrong tokens went through in 0.17 s, each logged at WARNING."""

from __future__ import annotations

import logging

import pytest
from clocks import ManualClock
from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)

from wiggle._server.auth_failures import MAX_FAILURES, WINDOW_SECONDS, AuthFailures

from .helpers import call, secured_server, tls_client


def test_an_address_waits_after_too_many_failures_and_others_do_not() -> None:
    # the throttle is the server's, shared by both ports since the review's finding 3
    # (wiggle/_server/auth_failures.py; tests/security/test_review_findings.py)
    clock = ManualClock(100.0)
    throttle = AuthFailures(clock)
    for i in range(MAX_FAILURES):
        assert not throttle.refusal("10.0.0.1", "test")
        throttle.failed("10.0.0.1", f"guess-{i}", "unknown", "test")
    clock.at += 10
    waits = throttle.refusal("10.0.0.1", "test")
    assert f"for {int(WINDOW_SECONDS) - 10} s more" in waits, waits
    assert not throttle.refusal("10.0.0.2", "test")  # another address signs in as ever
    clock.at += WINDOW_SECONDS  # the failures are a window old
    assert not throttle.refusal("10.0.0.1", "test")
    assert not throttle._addresses["10.0.0.1"].failures  # nothing kept of them but a count to log


async def test_the_sign_in_page_answers_429_past_the_limit_even_for_the_right_token(
    pki: Pki,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.http")
    async with secured_server("memory", "", "", pki) as (_, base):
        tls = tls_client(pki)
        # different tokens: the same wrong one again guesses nothing and is not counted again
        for i in range(MAX_FAILURES):
            status, _, answer = await call(
                "POST", f"{base}/signin", tls, {"token": f"tok-guess-{i}"}, {"Origin": base}
            )
            assert status == 401 and "not known" in answer["error"], answer
        for token in ("tok-guess-0", "tok-app"):
            status, headers, answer = await call(
                "POST", f"{base}/signin", tls, {"token": token}, {"Origin": base}
            )
            assert status == 429, answer
            assert (
                answer["code"] == "RESOURCE_EXHAUSTED"
                and "unknown credentials from this address" in answer["error"]
            )
            assert "Set-Cookie" not in headers
    # rate-limited: the first failure, then the start of the wait (not one line per guess)
    refused = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(refused) == 2 and "its calls and sign-ins wait" in refused[-1], refused
