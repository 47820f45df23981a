"""The outside operator trial's fixes that live in the browser (the server's side is
tests/dashboard/test_operator_trial.py), in Debian's chromium: the refresh keeps where the page
and its boxes were scrolled; the pages fit a 390 px phone (the header wraps, wide tables scroll in
their own box) and fetch no favicon; the dialog's defaults are placeholders; with the server away
a banner says since when the figures are old and a confirmed action says it was not sent; a tab
left open signs out at the idle timeout, and an action confirmed after it says it was not sent
before going to the sign-in page."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from wiggle import Workflow

from .helpers import (
    across_navigation,
    click,
    csp_violations,
    dashboard_server,
    screenshot,
    secured_server,
    start_chromium,
    until,
)

UNREACHABLE = re.compile(r"server unreachable since \d\d:\d\d:\d\dZ — figures are from then")


def looked_at() -> Any:
    return Workflow.define("trial-look").user_task("look").build()


def refreshed(driver: Any, times: int = 1) -> None:
    """Wait until the page's ``<main>`` was refreshed ``times`` more times (assets.py swap)."""
    for _ in range(times):
        before = driver.find_element(By.ID, "main").get_attribute("data-refreshed") or ""
        WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d, before=before: (
                (d.find_element(By.ID, "main").get_attribute("data-refreshed") or "") != before
            )
        )


def js(driver: Any, script: str) -> Any:
    return driver.execute_script(script)


async def awaiting(server: Any, iid: str) -> None:
    async def check() -> bool:
        """the instance awaits its user task"""
        return any(t.status == "AWAITING" for t in (await server.client.get(iid)).tokens)

    await until(check)


async def test_the_refresh_keeps_scrolling_and_a_phone_sees_the_whole_page() -> None:
    flow = looked_at()
    async with dashboard_server("memory", "", "") as (server, base):
        await server.client.register(flow)
        rows = {f"row-{i:03}": f"ligne {i} — déjà vu, 東京" for i in range(300)}
        iid = (await server.client.start(flow, rows)).instance_id
        await awaiting(server, iid)
        driver = await asyncio.to_thread(start_chromium)
        try:

            def scrolled_then_refreshed() -> dict[str, Any]:
                driver.set_window_size(1000, 600)  # shorter than the page: the page scrolls too
                driver.get(f"{base}/instances/{iid}")
                WebDriverWait(driver, 20).until(ec.presence_of_element_located((By.ID, "context")))
                js(driver, "document.getElementById('context').scrollTop = 700; window.scrollTo(0, 250);")
                seen = {
                    "before": js(
                        driver, "return [document.getElementById('context').scrollTop, window.scrollY]"
                    )
                }
                refreshed(driver, 2)
                seen["after"] = js(
                    driver, "return [document.getElementById('context').scrollTop, window.scrollY]"
                )
                seen["text"] = driver.find_element(By.ID, "context").text
                return seen

            seen = await asyncio.to_thread(scrolled_then_refreshed)
            assert seen["before"][0] == 700 and seen["before"][1] == 250, seen
            assert seen["after"] == seen["before"], seen  # the box and the page stay where they were
            assert '"row-150": "ligne 150 — déjà vu, 東京"' in seen["text"]

            def on_a_phone() -> dict[str, Any]:
                driver.execute_cdp_cmd(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True},
                )
                seen: dict[str, Any] = {}
                for page in ("instances", f"instances/{iid}", "queues", "schedules", "workflows", "cluster"):
                    driver.get(f"{base}/{page}")
                    WebDriverWait(driver, 20).until(
                        ec.presence_of_element_located((By.CSS_SELECTOR, "#main h2"))
                    )
                    seen[page] = js(
                        driver,
                        "const h = document.querySelector('header');"
                        "return {width: window.innerWidth, page: document.documentElement.scrollWidth,"
                        " header: Math.max(...[...h.children].map((c) => c.getBoundingClientRect().right)),"
                        " rows: h.getBoundingClientRect().height};",
                    )
                screenshot(driver, "trial-phone-instance")
                driver.get(f"{base}/instances/{iid}")
                WebDriverWait(driver, 20).until(ec.presence_of_element_located((By.ID, "tokens")))
                box = "document.getElementById('tokens').parentElement"
                seen["box"] = js(
                    driver, f"const b = {box}; return [b.className, b.scrollWidth > b.clientWidth];"
                )
                js(driver, f"{box}.scrollLeft = 120;")
                refreshed(driver)
                seen["box-left"] = js(driver, f"return {box}.scrollLeft")
                click(driver, "button#cancel")  # the dialog: its defaults are placeholders
                dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
                reason = dialog.find_element(By.ID, "reason")
                seen["reason"] = (reason.get_attribute("value"), reason.get_attribute("placeholder"))
                seen["dialog"] = js(
                    driver, "return document.getElementById('confirm').getBoundingClientRect().right"
                )
                screenshot(driver, "trial-phone-dialog")
                dialog.find_element(By.ID, "confirm-back").click()
                driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
                seen["log"] = driver.get_log("browser")
                return seen

            seen = await asyncio.to_thread(on_a_phone)
        finally:
            await asyncio.to_thread(driver.quit)
    for page in ("instances", f"instances/{iid}", "queues", "schedules", "workflows", "cluster"):
        fit = seen[page]
        assert fit["width"] == 390, (page, fit)  # laid out for the phone, not a 980 px desktop page
        assert fit["page"] <= 390 and fit["header"] <= 390, (page, fit)  # nothing sideways but in boxes
        assert fit["rows"] > 45, (page, fit)  # the header wrapped onto more than one row
    assert seen["box"] == ["wide", True]  # the tokens table scrolls inside its own box ...
    assert seen["box-left"] == 120  # ... and a refresh keeps where it was scrolled to
    assert seen["reason"] == ("", "cancelled from the dashboard") and seen["dialog"] <= 390
    assert not [e for e in seen["log"] if "favicon" in e["message"]], seen["log"]  # no icon asked for
    assert not [e for e in seen["log"] if "Content Security Policy" in e["message"]], seen["log"]


async def test_with_the_server_away_the_page_says_so_and_an_action_is_not_sent() -> None:
    flow = looked_at()
    async with dashboard_server("memory", "", "") as (server, base):
        await server.client.register(flow)
        iid = (await server.client.start(flow, {})).instance_id
        await awaiting(server, iid)
        side = server.server._http.side  # noqa: SLF001 - the HTTP port, to stop and start it again
        port, host = side.port, server.server.config.host
        driver = await asyncio.to_thread(start_chromium)
        try:

            def page_open() -> None:
                driver.get(f"{base}/instances/{iid}")
                WebDriverWait(driver, 20).until(
                    ec.presence_of_element_located((By.CSS_SELECTOR, "svg.graph"))
                )
                refreshed(driver)

            await asyncio.to_thread(page_open)
            await side.stop()

            def while_away() -> dict[str, str]:
                banner = WebDriverWait(driver, 20).until(ec.visibility_of_element_located((By.ID, "stale")))
                seen = {"banner": banner.text}
                click(driver, 'button.complete-task[data-task="look"]')
                dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
                dialog.find_element(By.ID, "actor").send_keys("ada")
                dialog.find_element(By.ID, "data").send_keys('{"seen": true}')
                dialog.find_element(By.ID, "confirm-yes").click()
                WebDriverWait(driver, 20).until(
                    lambda d: d.find_element(By.CSS_SELECTOR, "#confirm .err").text
                )
                seen["error"] = driver.find_element(By.CSS_SELECTOR, "#confirm .err").text
                seen["open"] = str(driver.find_element(By.ID, "confirm").is_displayed())
                screenshot(driver, "trial-server-away")
                return seen

            seen = await asyncio.to_thread(while_away)
            assert UNREACHABLE.fullmatch(seen["banner"]), seen
            assert seen["error"] == (
                "The server could not be reached: the action was not sent. Try again when it is back."
            )
            assert seen["open"] == "True"  # the dialog stays, with what was typed in it
            assert (await server.client.get(iid)).tokens[0].status == "AWAITING"
            await side.start(host, port)

            def back_again() -> dict[str, Any]:
                driver.find_element(By.ID, "confirm-back").click()
                WebDriverWait(driver, 20).until(ec.invisibility_of_element_located((By.ID, "stale")))
                click(driver, 'button.complete-task[data-task="look"]')
                dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
                data = dialog.find_element(By.ID, "data").get_attribute("value")  # kept: the same action
                dialog.find_element(By.ID, "confirm-yes").click()
                WebDriverWait(driver, 20).until(ec.invisibility_of_element_located((By.ID, "confirm")))
                return {
                    "data": data,
                    "notice": driver.find_element(By.ID, "notice").text,
                    "log": driver.get_log("browser"),
                }

            again = await asyncio.to_thread(back_again)
        finally:
            await asyncio.to_thread(driver.quit)
        assert again["data"] == '{"seen": true}' and again["notice"].startswith("Done"), again
        info = await server.client.get(iid)
        assert info.status == "COMPLETED" and info.context["seen"] is True
        uncaught = [e["message"] for e in again["log"] if "Uncaught" in e["message"]]
        assert uncaught == [], uncaught  # every failure was handled, none left to the console


async def test_an_idle_tab_signs_out_and_an_action_after_it_says_it_was_not_sent(pki: Pki) -> None:  # noqa: F811
    async with secured_server("memory", "", "", pki) as (server, base):
        async with pki.client(server.target, "ops") as admin:
            await admin.register(looked_at())
            iid = (await admin.start(looked_at(), {})).instance_id
        await awaiting_secured(server, iid)
        server._http.side.sessions.idle = 4  # noqa: SLF001 - seconds, not the 60 s a setting may be
        driver = await asyncio.to_thread(start_chromium, True)
        try:

            def sign_in() -> None:
                wait = WebDriverWait(driver, 20)
                wait.until(across_navigation(ec.presence_of_element_located((By.ID, "token"))))
                driver.find_element(By.ID, "token").send_keys("tok-ops")
                driver.find_element(By.ID, "signin-token").click()
                wait.until(across_navigation(ec.presence_of_element_located((By.CSS_SELECTOR, "svg.graph"))))

            def left_open() -> dict[str, str]:
                driver.get(f"{base}/instances/{iid}")
                sign_in()
                # nobody touches the page: its refreshes run every 2 s, and after 4 s idle it signs out
                WebDriverWait(driver, 30).until(
                    across_navigation(ec.visibility_of_element_located((By.ID, "signed-out")))
                )
                screenshot(driver, "trial-idle-signed-out")
                return {"url": driver.current_url, "why": driver.find_element(By.ID, "signed-out").text}

            seen = await asyncio.to_thread(left_open)
            assert seen["url"].endswith(f"/signin?next=%2Finstances%2F{iid}"), seen
            assert (
                seen["why"] == "You were signed out: the session ended: unused for 4 s (session_idle_seconds)"
            ), seen

            def dialog_left_open() -> dict[str, Any]:
                sign_in()  # the sign-in page of before: back on the instance after it
                click(driver, 'button.complete-task[data-task="look"]')
                dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
                dialog.find_element(By.ID, "actor").send_keys("ada")
                time.sleep(5)  # the dialog pauses the refresh: the session reaches its idle timeout
                dialog.find_element(By.ID, "confirm-yes").click()
                WebDriverWait(driver, 20).until(ec.visibility_of_element_located((By.ID, "confirm-signin")))
                seen = {
                    "error": dialog.find_element(By.CSS_SELECTOR, ".err").text,
                    "confirm": dialog.find_element(By.ID, "confirm-yes").is_displayed(),
                }
                screenshot(driver, "trial-dialog-signed-out")
                dialog.find_element(By.ID, "confirm-signin").click()
                WebDriverWait(driver, 20).until(
                    across_navigation(ec.visibility_of_element_located((By.ID, "signed-out")))
                )
                seen["url"] = driver.current_url
                seen["csp"] = csp_violations(driver)
                return seen

            seen = await asyncio.to_thread(dialog_left_open)
        finally:
            await asyncio.to_thread(driver.quit)
        assert seen["error"] == (
            "The action was not sent: your session has ended (the session ended: unused for 4 s "
            "(session_idle_seconds)). Sign in again, then repeat it."
        ), seen
        assert seen["confirm"] is False, seen  # "sign in again" instead of Confirm
        assert seen["url"].endswith(f"/signin?next=%2Finstances%2F{iid}") and seen["csp"] == [], seen
        view = await server.instances.get_instance(iid)
        assert view.tokens[0].status == "AWAITING"  # nothing was done
        assert not [e for e in await server.instances.history(iid) if e.kind == "OPERATOR"]


async def awaiting_secured(server: Any, iid: str) -> None:
    async def check() -> bool:
        """the instance awaits its user task"""
        return any(t.status == "AWAITING" for t in (await server.instances.get_instance(iid)).tokens)

    await until(check)
