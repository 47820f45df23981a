"""Cross-site request forgery, tried for real: a page on another origin (a second HTTP server on
another loopback port) opened in Chromium posts a forged form and forged fetches to the dashboard,
without an identity file and under TLS with a signed-in session. Each forged request reaches the
server (its refusal is logged), is refused, and changes nothing; the dashboard will not be framed."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

import pytest
from pg import TEST_DATABASE_URL
from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from wiggle import Workflow

from .helpers import (
    across_navigation,
    dashboard_server,
    page_server,
    screenshot,
    secured_server,
    start_chromium,
    until,
)

EVIL = """<!doctype html><html><head><title>win a prize</title></head><body><h1>You won!</h1>
<iframe name="sink" id="sink"></iframe>
<iframe id="framed" src="DASH/instances"></iframe>
<form id="forged" method="POST" action="DASH/api/instances/IID/cancel" enctype="text/plain" target="sink">
<input type="hidden" name='{"actor": "mallory", "reason": "forged", "pad": "' value='"}'></form>
<pre id="out">working</pre>
<script>
const out = document.getElementById('out');
(async () => {
  try {
    await fetch('DASH/api/instances/IID/signals/go', {method: 'POST', mode: 'no-cors', credentials: 'include',
      headers: {'Content-Type': 'text/plain'}, body: '{"actor": "mallory", "data": {}}'});
    out.dataset.nocors = 'sent';
  } catch (e) { out.dataset.nocors = 'error ' + e; }
  try {
    const r = await fetch('DASH/api/schedules/nightly/pause', {method: 'POST', credentials: 'include',
      headers: {'Content-Type': 'application/json'}, body: '{"actor": "mallory"}'});
    out.dataset.cors = 'answered ' + r.status;
  } catch (e) { out.dataset.cors = 'blocked'; }
  document.getElementById('forged').submit();
  out.dataset.done = '1';
  out.textContent = 'done';
})();
</script></body></html>"""


def evil_page(base: str, iid: str) -> str:
    return EVIL.replace("DASH", base).replace("IID", iid)


async def scene(server: Any, client: Any, name: str) -> tuple[str, Any]:
    """A RUNNING instance awaiting its user task, an active schedule; (instance id, the state)."""
    flow = Workflow.define(name).user_task("approve").wait_signal("go").build()
    await client.register(flow)
    iid: str = (await client.start(flow, {"n": 1})).instance_id
    await client.create_schedule("nightly", flow, {}, every=3600)

    async def awaiting() -> bool:
        return any(t.status == "AWAITING" for t in (await client.get(iid)).tokens)

    await until(awaiting)
    return iid, await state(client, iid)


async def state(client: Any, iid: str) -> Any:
    return (await client.get(iid), await client.history(iid), await client.get_schedule("nightly"))


async def forge(
    driver: Any, site: str, caplog: pytest.LogCaptureFixture, iid: str, shot: str
) -> dict[str, Any]:
    """Open the other site's page and wait until both forged POSTs reached the dashboard and were
    refused (the form's and the no-cors fetch's); the JSON fetch's preflight is the browser's to refuse."""

    def visit() -> dict[str, Any]:
        driver.get(site)
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "out").get_attribute("data-done"))
        out = driver.find_element(By.ID, "out")
        seen = {k: out.get_attribute(f"data-{k}") for k in ("nocors", "cors")}
        seen["console"] = [e["message"] for e in driver.get_log("browser")]
        return seen

    seen = await asyncio.to_thread(visit)

    def refused(path: str) -> int:
        return sum(1 for r in caplog.records if r.getMessage().startswith(f"refused POST {path} "))

    async def both_refused() -> bool:
        return (
            refused(f"/api/instances/{iid}/cancel") >= 1 and refused(f"/api/instances/{iid}/signals/go") >= 1
        )

    await until(both_refused)
    await asyncio.to_thread(screenshot, driver, shot)
    seen["reasons"] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused POST")]
    return seen


async def test_forged_requests_without_an_identity_file(
    store: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.http")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        iid, before = await scene(server, server.client, f"forged-open-{store}")
        async with page_server(evil_page(base, iid)) as site:
            driver = await asyncio.to_thread(start_chromium)
            try:
                seen = await forge(driver, site, caplog, iid, f"forgery-refused-open-{store}")
            finally:
                await asyncio.to_thread(driver.quit)
        # the no-cors answer is withheld from the page (Cross-Origin-Resource-Policy), the preflight refused
        assert seen["nocors"] in ("sent", "error TypeError: Failed to fetch") and seen["cors"] == "blocked", (
            seen
        )
        assert any(
            "may not change anything" in r or "is not this dashboard's origin" in r for r in seen["reasons"]
        )
        assert any("X-Frame-Options" in m or "frame-ancestors" in m for m in seen["console"]), seen["console"]
        assert await state(server.client, iid) == before  # nothing changed
        after = await server.client.get(iid)
        assert after.status == "RUNNING" and not [e for e in before[1] if e.kind == "OPERATOR"]


async def test_forged_requests_against_a_signed_in_session(
    store: str,
    pg_schema: str,
    pki: Pki,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.http")
    async with secured_server(store, pg_schema, TEST_DATABASE_URL, pki) as (server, base):
        async with pki.client(server.target, "ops") as admin:
            iid, before = await scene(server, admin, f"forged-session-{store}")
            # the other site is served over TLS on the same host: same-site, so the browser sends
            # the SameSite=Strict session cookie along; only the anti-forgery checks stand in the way
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
            async with page_server(evil_page(base, iid), context) as site:
                driver = await asyncio.to_thread(start_chromium, True)
                try:

                    def sign_in() -> str:
                        driver.get(f"{base}/signin")
                        WebDriverWait(driver, 20).until(ec.presence_of_element_located((By.ID, "token")))
                        driver.find_element(By.ID, "token").send_keys("tok-ops")
                        driver.find_element(By.ID, "signin-token").click()
                        WebDriverWait(driver, 20).until(
                            across_navigation(ec.presence_of_element_located((By.ID, "who")))
                        )
                        return str(driver.find_element(By.ID, "who").text)

                    assert await asyncio.to_thread(sign_in) == "ops"
                    seen = await forge(driver, site, caplog, iid, f"forgery-refused-session-{store}")
                finally:
                    await asyncio.to_thread(driver.quit)
            assert (
                seen["nocors"] in ("sent", "error TypeError: Failed to fetch") and seen["cors"] == "blocked"
            ), seen
            assert any("same-site request may not change anything" in r for r in seen["reasons"]), seen[
                "reasons"
            ]
            assert await state(admin, iid) == before
            assert (await admin.get(iid)).status == "RUNNING"
