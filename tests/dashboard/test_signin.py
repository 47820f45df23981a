"""Signing in to the dashboard under TLS and an identity file: in Chromium (sign in, act, sign
out), the session cookie's attributes, roles exactly as on gRPC, sessions ended by a reload of
the identity file, expiry, the client-certificate sign-in under mTLS, and an SSO proxy's header."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pg import TEST_DATABASE_URL
from security.certs import Authority
from security.conftest import IDENTITIES, Pki, pki, write_identities  # noqa: F401  (pki: a fixture)
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from wiggle import Workflow
from wiggle._security.tokens import Identity, Role, hash_token
from wiggle._server.web.sessions import ENDED_KEPT_SECONDS, TOKEN, UNKNOWN, Sessions
from wiggle._server.web.signin import safe_next

from .helpers import (
    across_navigation,
    call,
    click,
    csp_violations,
    screenshot,
    secured_server,
    start_chromium,
    tls_client,
    until,
)

COOKIE = "__Host-wiggle-session"


def flow(name: str) -> Any:
    return Workflow.define(name).user_task("approve").wait_signal("go").build()


def cookie_of(headers: Any) -> tuple[str, str]:
    """(session id, the whole Set-Cookie line) of a sign-in answer."""
    [line] = [c for c in headers.getall("Set-Cookie") if c.startswith(COOKIE + "=")]
    return line.split(";", 1)[0].split("=", 1)[1], line


async def sign_in(base: str, context: ssl.SSLContext, token: str) -> tuple[str, str]:
    """(session id, anti-forgery token) of a session signed in with ``token``."""
    status, headers, answer = await call(
        "POST", f"{base}/signin", context, {"token": token}, {"Origin": base}
    )
    assert status == 200, answer
    session, _ = cookie_of(headers)
    status, _, page = await call(
        "GET", f"{base}/instances", context, headers={"Cookie": f"{COOKIE}={session}"}
    )
    assert status == 200, page
    [csrf] = re.findall(r'<meta name="wiggle-csrf" content="([^"]+)">', page)
    return session, csrf


def next_of(url: str) -> str:
    """Where a sign-in page's URL sends the browser after signing in."""
    parts = urlsplit(url)
    assert parts.path == "/signin", url
    return parse_qs(parts.query)["next"][0]


def as_browser(base: str, session: str, csrf: str = "") -> dict[str, str]:
    headers = {"Cookie": f"{COOKIE}={session}", "Origin": base}
    if csrf:
        headers["X-Wiggle-CSRF"] = csrf
    return headers


async def started(server: Any, keys: Pki, name: str) -> str:
    """A RUNNING instance awaiting its user task."""
    async with keys.client(server.target, "ops") as admin:
        await admin.register(flow(name))
        iid: str = (await admin.start(flow(name), {})).instance_id

    async def awaiting() -> bool:
        return any(t.status == "AWAITING" for t in (await server.instances.get_instance(iid)).tokens)

    await until(awaiting)
    return iid


async def test_sessions_cookie_roles_csrf_and_reload(store: str, pg_schema: str, pki: Pki) -> None:  # noqa: F811
    async with secured_server(store, pg_schema, TEST_DATABASE_URL, pki) as (server, base):
        tls = tls_client(pki)
        iid = await started(server, pki, f"signin-{store}")
        # a browser with no session is sent to the sign-in page; the API answers 401
        status, headers, _ = await call("GET", f"{base}/instances", tls, headers={"Accept": "text/html"})
        assert status == 303 and next_of(headers["Location"]) == "/instances"
        assert (await call("GET", f"{base}/api/instances", tls))[0] == 401
        # a wrong token opens nothing
        status, headers, answer = await call(
            "POST", f"{base}/signin", tls, {"token": "tok-nobody"}, {"Origin": base}
        )
        assert status == 401 and "not known" in answer["error"] and "Set-Cookie" not in headers
        # the cookie: opaque, HttpOnly, Secure, SameSite=Strict, Path=/, and the session's end
        status, headers, answer = await call(
            "POST", f"{base}/signin", tls, {"token": "tok-app", "next": "//evil"}, {"Origin": base}
        )
        assert status == 200 and answer["identity"] == "app" and answer["next"] == "/instances", answer
        session, line = cookie_of(headers)
        attributes = {a.strip().split("=")[0].lower() for a in line.split(";")[1:]}
        assert {"httponly", "secure", "path", "samesite", "max-age"} <= attributes, line
        assert "SameSite=Strict" in line and "Path=/" in line and "tok-app" not in line and len(session) >= 40
        # the cookie outlives the session, so that the server sees it and says why the session ended
        # (at Max-Age == session_max_seconds the browser dropped it and the page said nothing)
        max_age = int(server.config.session_max_seconds) + ENDED_KEPT_SECONDS
        assert f"Max-Age={max_age}" in line, line
        session, csrf = await sign_in(base, tls, "tok-app")
        # roles exactly as on gRPC: a client may signal (SignalInstance) but not cancel (CancelInstance)
        who = {"actor": "ada", "data": {}}
        status, _, answer = await call(
            "POST", f"{base}/api/instances/{iid}/cancel", tls, who, as_browser(base, session, csrf)
        )
        assert status == 403 and "CancelInstance" in answer["error"], answer
        # the session's own request without its anti-forgery token, or without its Origin: refused
        status, _, answer = await call(
            "POST", f"{base}/api/instances/{iid}/signals/go", tls, who, as_browser(base, session)
        )
        assert status == 403 and "X-Wiggle-CSRF" in answer["error"], answer
        no_origin = {"Cookie": f"{COOKIE}={session}", "X-Wiggle-CSRF": csrf}
        status, _, answer = await call("POST", f"{base}/api/instances/{iid}/signals/go", tls, who, no_origin)
        assert status == 403 and "Origin" in answer["error"], answer
        assert not [e for e in await server.instances.history(iid) if e.kind == "OPERATOR"]
        status, _, answer = await call(
            "POST", f"{base}/api/instances/{iid}/signals/go", tls, who, as_browser(base, session, csrf)
        )
        assert status == 200 and answer["outcome"] == "BUFFERED", answer
        [entry] = [e for e in await server.instances.history(iid) if e.kind == "OPERATOR"]
        assert entry.worker_id.startswith("ada as app (dashboard")
        # a reload that changes the identity's roles ends its sessions; one that keeps it does not
        ops, ops_csrf = await sign_in(base, tls, "tok-ops")
        IDENTITIES_CHANGED = {**IDENTITIES, "app": (["viewer"], [])}
        write_changed(pki.auth_file, IDENTITIES_CHANGED)
        server.reload()
        status, _, answer = await call("GET", f"{base}/api/instances", tls, headers=as_browser(base, session))
        assert status == 401 and answer["error"] == (
            "the session ended: its identity was removed or changed (the identity file was reloaded); "
            "sign in again at /signin"
        ), answer
        assert (await call("GET", f"{base}/api/instances", tls, headers=as_browser(base, ops)))[0] == 200
        # ... and one that removes the identity ends its sessions too
        write_changed(pki.auth_file, {k: v for k, v in IDENTITIES_CHANGED.items() if k != "ops"})
        server.reload()
        assert (await call("GET", f"{base}/api/instances", tls, headers=as_browser(base, ops)))[0] == 401
        # sign-out ends the session: its cookie opens nothing afterwards
        write_identities(pki.auth_file)
        server.reload()
        session, csrf = await sign_in(base, tls, "tok-watcher")
        status, headers, answer = await call(
            "POST", f"{base}/signout", tls, {}, as_browser(base, session, csrf)
        )
        assert status == 200 and answer == {"signed_out": True}
        assert any(c.startswith(COOKIE + "=;") or "Max-Age=0" in c for c in headers.getall("Set-Cookie"))
        assert (await call("GET", f"{base}/api/instances", tls, headers=as_browser(base, session)))[0] == 401
        # a bearer token still works for scripts, without Origin or anti-forgery token
        status, _, answer = await call(
            "POST",
            f"{base}/api/instances/{iid}/cancel",
            tls,
            {"actor": "cron"},
            {"Authorization": "Bearer tok-ops"},
        )
        assert status == 200 and answer["status"] == "CANCELLED", answer


def write_changed(path: Path, identities: dict[str, tuple[list[str], list[str]]]) -> None:
    entries = []
    for name, (roles, queues) in identities.items():
        entry: dict[str, object] = {"name": name, "roles": roles, "token_sha256": hash_token(f"tok-{name}")}
        if queues:
            entry["queues"] = queues
        entries.append(entry)
    path.write_text(json.dumps({"identities": entries}))


def test_idle_and_absolute_expiry() -> None:
    now = [1000.0]
    sessions = Sessions(None, idle=60, max_age=300, clock=lambda: now[0])
    ada = Identity("ada", frozenset({Role.ADMIN}))
    first = sessions.open(ada, TOKEN, hash_token("tok"))
    now[0] += 59
    assert sessions.get(first.id)[0] is first  # used: the idle time starts again
    now[0] += 59
    assert sessions.get(first.id)[0] is first
    now[0] += 60
    session, why = sessions.get(first.id)
    assert session is None and "unused for 60 s" in why
    second = sessions.open(ada, TOKEN, hash_token("tok"))
    for _ in range(5):  # used every 50 s, it still ends 300 s after sign-in
        now[0] += 50
        assert sessions.get(second.id)[0] is second
    now[0] += 50
    third = sessions.open(ada, TOKEN, hash_token("tok"))  # sweeps the ended one: its reason stays
    session, why = sessions.get(second.id)
    assert session is None and why == "the session ended: signed in 300 s ago (session_max_seconds)"
    assert sessions.get(third.id)[0] is third and len(sessions) == 1


def test_why_a_session_ended_is_said_after_it_is_gone() -> None:
    # a revoked session said "the session is unknown" (the log said why); one swept by another's
    # sign-in likewise; the reason is kept for ENDED_KEPT_SECONDS
    now = [1000.0]
    sessions = Sessions(None, idle=600, max_age=3600, clock=lambda: now[0])
    ada = Identity("ada", frozenset({Role.ADMIN}))
    revoked = sessions.open(ada, TOKEN, hash_token("tok"))
    sessions.revalidate(frozenset({"ada"}))
    assert sessions.get(revoked.id) == (
        None,
        "the session ended: its identity was removed or changed (the identity file was reloaded)",
    )
    assert sessions.get("never-was") == (None, UNKNOWN)
    now[0] += ENDED_KEPT_SECONDS
    assert sessions.get(revoked.id) == (None, UNKNOWN)


async def test_certificate_sign_in_under_mtls(store: str, pg_schema: str, pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    clients = Authority(tmp_path, "client-ca")
    cert, key = clients.issue("ada.internal", server=False)
    write_identities(pki.auth_file, [{"name": "ada", "roles": ["admin"], "cert_cn": "ada.internal"}])
    async with secured_server(
        store, pg_schema, TEST_DATABASE_URL, pki, tls_client_ca=str(clients.ca_file)
    ) as (server, base):
        tls = tls_client(pki)
        tls.load_cert_chain(str(cert), str(key))
        iid = await started_mtls(server, f"mtls-{store}")
        status, _, page = await call("GET", f"{base}/signin", tls)
        assert status == 200 and "ada.internal" in page and 'id="signin-certificate"' in page
        status, headers, answer = await call(
            "POST", f"{base}/signin", tls, {"certificate": True}, {"Origin": base}
        )
        assert status == 200 and answer["identity"] == "ada", answer
        session, _ = cookie_of(headers)
        assert (await call("GET", f"{base}/api/instances/{iid}", tls, headers=as_browser(base, session)))[
            0
        ] == 200
        # a client certificate is ambient in a browser: its actions need this origin and JSON too
        who = {"actor": "ada"}
        status, _, answer = await call(
            "POST", f"{base}/api/instances/{iid}/cancel", tls, who, {"Origin": "https://evil.example"}
        )
        assert status == 403 and "evil.example" in answer["error"]
        status, _, answer = await call(
            "POST",
            f"{base}/api/instances/{iid}/cancel",
            tls,
            None,
            {"Content-Type": "text/plain", "Origin": base},
        )
        assert status == 415, answer
        assert (await server.instances.get_instance(iid)).instance.status == "RUNNING"
        status, _, answer = await call(
            "POST", f"{base}/api/instances/{iid}/cancel", tls, who, {"Origin": base}
        )
        assert status == 200 and answer["status"] == "CANCELLED", answer


async def started_mtls(server: Any, name: str) -> str:
    """The mTLS server takes gRPC calls with a client certificate only: start through the server."""
    await server.instances.register(flow(name).definition)
    view = await server.instances.start(name, "", {}, "", "")
    return str(view.instance.id)


@pytest.mark.parametrize("proxies, trusted", [("127.0.0.1, 10.0.0.0/8", True), ("10.9.9.9", False)])
async def test_sso_proxy_header(pki: Pki, proxies: str, trusted: bool) -> None:  # noqa: F811
    # a person the proxy signs in needs no token or certificate in the identity file (docs/dashboard.md)
    write_identities(pki.auth_file, [{"name": "alice", "roles": ["viewer"]}])
    async with secured_server(
        "memory", "", "", pki, http_trusted_header="X-Forwarded-User", http_trusted_proxies=proxies
    ) as (server, base):
        tls = tls_client(pki)
        iid = await started(server, pki, "sso")
        status, _, page = await call(
            "GET", f"{base}/instances/{iid}", tls, headers={"X-Forwarded-User": "ops"}
        )
        if not trusted:
            assert (
                status == 401
                and "only taken from the SSO proxies" in page["error"]
                and "127.0.0.1" in page["error"]
            )
            return
        assert status == 200 and 'id="who">ops<' in page
        [csrf] = re.findall(r'<meta name="wiggle-csrf" content="([^"]+)">', page)
        # the proxy's sign-in is ambient in the browser: its actions need Origin and the page's token
        who = {"actor": "ada", "data": {}}
        proxied = {"X-Forwarded-User": "ops", "Origin": base}
        status, _, answer = await call("POST", f"{base}/api/instances/{iid}/signals/go", tls, who, proxied)
        assert status == 403 and "X-Wiggle-CSRF" in answer["error"]
        status, _, answer = await call(
            "POST", f"{base}/api/instances/{iid}/signals/go", tls, who, {**proxied, "X-Wiggle-CSRF": csrf}
        )
        assert status == 200, answer
        status, _, answer = await call(
            "GET", f"{base}/api/instances", tls, headers={"X-Forwarded-User": "mallory"}
        )
        assert status == 401 and "not in the identity file" in answer["error"]
        status, _, page = await call(
            "GET", f"{base}/instances/{iid}", tls, headers={"X-Forwarded-User": "alice"}
        )
        assert status == 200 and 'id="who">alice<' in page


async def test_sign_in_act_and_sign_out_in_a_browser(store: str, pg_schema: str, pki: Pki) -> None:  # noqa: F811
    async with secured_server(store, pg_schema, TEST_DATABASE_URL, pki) as (server, base):
        iid = await started(server, pki, f"browser-signin-{store}")
        driver = await asyncio.to_thread(start_chromium, True)
        try:

            def sign_in_and_act() -> dict[str, Any]:
                wait = WebDriverWait(driver, 20)
                driver.get(f"{base}/instances/{iid}")
                wait.until(ec.presence_of_element_located((By.ID, "signin")))
                seen: dict[str, Any] = {"redirected": driver.current_url}
                driver.find_element(By.ID, "token").send_keys("tok-wrong")
                driver.find_element(By.ID, "signin-token").click()
                wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#signin .err").text)
                seen["wrong"] = driver.find_element(By.CSS_SELECTOR, "#signin .err").text
                screenshot(driver, f"signin-refused-{store}")
                field = driver.find_element(By.ID, "token")
                field.clear()
                field.send_keys("tok-ops")
                driver.find_element(By.ID, "signin-token").click()
                wait.until(across_navigation(ec.presence_of_element_located((By.CSS_SELECTOR, "svg.graph"))))
                seen["landed"] = driver.current_url
                seen["who"] = driver.find_element(By.ID, "who").text
                seen["cookie"] = driver.get_cookie(COOKIE)
                screenshot(driver, f"signed-in-instance-{store}")
                click(driver, 'button.complete-task[data-task="approve"]')
                dialog = wait.until(ec.visibility_of_element_located((By.ID, "confirm")))
                dialog.find_element(By.ID, "actor").clear()
                dialog.find_element(By.ID, "actor").send_keys("grace")
                dialog.find_element(By.ID, "confirm-yes").click()
                wait.until(ec.invisibility_of_element_located((By.ID, "confirm")))
                return seen

            seen = await asyncio.to_thread(sign_in_and_act)
            assert next_of(seen["redirected"]) == f"/instances/{iid}" and "not known" in seen["wrong"]
            assert seen["landed"].endswith(f"/instances/{iid}") and seen["who"] == "ops"
            cookie = seen["cookie"]
            assert (
                cookie["httpOnly"]
                and cookie["secure"]
                and cookie["sameSite"] == "Strict"
                and cookie["path"] == "/"
            )
            [entry] = [e for e in await server.instances.history(iid) if e.kind == "OPERATOR"]
            assert entry.node_id == "approve" and entry.worker_id.startswith("grace as ops (dashboard")

            def sign_out() -> tuple[str, str, list[str]]:
                wait = WebDriverWait(driver, 20)
                wait.until(lambda d: "go" in d.find_element(By.ID, "main").text)
                driver.find_element(By.ID, "signout").click()
                wait.until(across_navigation(ec.presence_of_element_located((By.ID, "signin"))))
                after = driver.current_url
                screenshot(driver, f"signed-out-{store}")
                driver.get(f"{base}/instances")  # the session is over: back to the sign-in page
                wait.until(ec.presence_of_element_located((By.ID, "signin")))
                return after, driver.current_url, csp_violations(driver)

            after, again, violations = await asyncio.to_thread(sign_out)
            assert after.endswith("/signin") and next_of(again) == "/instances"
            assert violations == []  # no inline script or style anywhere on these pages
            status, _, _ = await call(
                "GET",
                f"{base}/api/instances",
                tls_client(pki),
                headers={"Cookie": f"{COOKIE}={cookie['value']}"},
            )
            assert status == 401  # the old cookie opens nothing
        finally:
            await asyncio.to_thread(driver.quit)


@pytest.mark.parametrize(
    "asked, goes",
    [
        ("/instances/wi-1?x=1", "/instances/wi-1?x=1"),
        ("//evil.example", "/instances"),
        ("/\t/evil.example", "/instances"),
        ("/\\evil.example", "/instances"),
        ("https://evil.example", "/instances"),
        ("/signout", "/instances"),
        (7, "/instances"),
    ],
)
def test_sign_in_goes_back_only_to_this_dashboard(asked: object, goes: str) -> None:
    assert safe_next(asked) == goes
