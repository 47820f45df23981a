"""The outside security review's finding 4: `POST /signin` with any valid token (a worker's too)
opened a session, and 10,000 of them evicted every other user's session (one least recently used
list for all). Sessions are now capped per identity (a flood ends the flooder's own oldest), the
global cap takes from the identity holding the most, and a credential whose roles read nothing
on the dashboard cannot sign in."""

from __future__ import annotations

from typing import Any

import pytest
from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)

from wiggle._security.tokens import Identity, Role, hash_token
from wiggle._server.web.sessions import MAX_SESSIONS_PER_IDENTITY, TOKEN, Sessions

from .helpers import call, secured_server, tls_client

COOKIE = "__Host-wiggle-session"


def _cookie(headers: Any) -> str:
    [line] = [c for c in headers.getall("Set-Cookie") if c.startswith(COOKIE + "=")]
    return line.split(";", 1)[0]


def test_one_identity_signing_in_again_and_again_ends_only_its_own_sessions() -> None:
    now = [1000.0]
    sessions = Sessions(None, idle=600, max_age=3600, clock=lambda: now[0], per_identity=3)
    ada = Identity("ada", frozenset({Role.ADMIN}))
    eve = Identity("eve", frozenset({Role.VIEWER}))
    kept = sessions.open(ada, TOKEN, hash_token("tok-ada"))
    flood = []
    for _ in range(50):
        now[0] += 1
        flood.append(sessions.open(eve, TOKEN, hash_token("tok-eve")))
    assert sessions.get(kept.id)[0] is kept
    assert len(sessions) == 1 + 3
    assert [s.id for s in flood[-3:]] == [s.id for s in sessions._by_id.values() if s.identity is eve]


def test_past_the_global_limit_the_identity_holding_the_most_gives_way() -> None:
    now = [1000.0]
    sessions = Sessions(None, idle=600, max_age=3600, clock=lambda: now[0], limit=5, per_identity=20)
    ada = Identity("ada", frozenset({Role.ADMIN}))
    eve = Identity("eve", frozenset({Role.VIEWER}))
    kept = sessions.open(ada, TOKEN, hash_token("tok-ada"))  # the least recently used of all
    for _ in range(10):
        now[0] += 1
        sessions.open(eve, TOKEN, hash_token("tok-eve"))
    assert sessions.get(kept.id)[0] is kept and len(sessions) == 5


async def test_a_sign_in_flood_leaves_the_others_signed_in_and_a_worker_cannot_sign_in(
    pki: Pki,  # noqa: F811
) -> None:
    async with secured_server("memory", "", "", pki) as (server, base):
        # a global limit the flood below passes, as 10,000 sign-ins would pass MAX_SESSIONS
        server._http.side.sessions.limit = MAX_SESSIONS_PER_IDENTITY + 5  # type: ignore[union-attr]
        tls = tls_client(pki)
        status, headers, answer = await call(
            "POST", f"{base}/signin", tls, {"token": "tok-ops"}, {"Origin": base}
        )
        assert status == 200, answer
        admin = _cookie(headers)
        for _ in range(MAX_SESSIONS_PER_IDENTITY + 10):
            status, _, answer = await call(
                "POST", f"{base}/signin", tls, {"token": "tok-watcher"}, {"Origin": base}
            )
            assert status == 200, answer
        status, _, answer = await call("GET", f"{base}/api/queues", tls, headers={"Cookie": admin})
        assert status == 200, answer  # the admin's session outlived the viewer's flood
        # a worker's token is valid, but reads nothing here: no session for it
        status, headers, answer = await call(
            "POST", f"{base}/signin", tls, {"token": "tok-pay-worker"}, {"Origin": base}
        )
        assert status == 403 and answer["code"] == "PERMISSION_DENIED", answer
        assert "'pay-worker' (roles: worker) can read nothing on the dashboard" in answer["error"], answer
        assert "admin, client, viewer" in answer["error"]
        assert "Set-Cookie" not in headers


@pytest.mark.parametrize("roles", [{Role.WORKER}, {Role.WORKER, Role.VIEWER}])
def test_which_roles_may_sign_in(roles: set[Role]) -> None:
    from wiggle._server.web.signin import DASHBOARD_ROLES

    assert bool(frozenset(roles) & DASHBOARD_ROLES) == (Role.VIEWER in roles)
