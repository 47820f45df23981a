"""The dashboard's operating actions in a real browser: send a signal and retry a failed instance
from the Instance page, pause and trigger a schedule from the Schedules page; each through the
confirmation dialog, with the outcome checked in the store."""

from __future__ import annotations

import asyncio

from pg import TEST_DATABASE_URL
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from .helpers import click, dashboard_server, orders, until
from .test_browser import browser, confirm, shot, stable, wait_for  # noqa: F401  (browser: a fixture)


def signal_in_browser(
    driver: webdriver.Chrome, base: str, iid: str, name: str, data: str, actor: str
) -> None:
    """Open the instance, click "send a signal", fill in name, data and who, confirm."""
    driver.get(f"{base}/instances/{iid}")
    click(driver, "button#signal")
    dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
    for field, value in (("signal-name", name), ("data", data), ("actor", actor)):
        element = dialog.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)
    dialog.find_element(By.ID, "confirm-yes").click()
    WebDriverWait(driver, 20).until(ec.invisibility_of_element_located((By.ID, "confirm")))


async def test_signal_retry_and_schedule_actions_in_a_browser(
    browser: webdriver.Chrome,  # noqa: F811
    store: str,
    pg_schema: str,
) -> None:
    flow = orders(f"browser-operate-{store}")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with server.worker([flow]):
            iid = (await server.client.start(flow, {"declined": True})).instance_id

            async def awaiting() -> bool:
                return any(t.status == "AWAITING" for t in (await server.client.get(iid)).tokens)

            await until(awaiting)
            await asyncio.to_thread(signal_in_browser, browser, base, iid, "approve", '{"ok": true}', "ada")
            assert (await server.client.wait(iid, timeout=20)).status == "FAILED"
            history = await server.client.history(iid)
            ops = [e for e in history if e.kind == "OPERATOR"]
            assert [(e.outcome, e.node_id) for e in ops] == [("SIGNALLED", "approve")]
            assert ops[0].worker_id.startswith("ada (dashboard")

            def retry_in_browser() -> None:
                browser.get(f"{base}/instances/{iid}")
                wait_for(browser, "svg.graph")
                assert not browser.find_elements(By.CSS_SELECTOR, "button#signal")  # FAILED: no signal
                confirm(browser, "button#retry", "grace")

            await asyncio.to_thread(retry_in_browser)

            async def retried() -> bool:
                return any(e.kind == "RETRY" for e in await server.client.history(iid))

            await until(retried)
            [entry] = [e for e in await server.client.history(iid) if e.kind == "RETRY"]
            assert entry.worker_id.startswith("grace (dashboard") and entry.node_id == "charge"
            assert (await server.client.wait(iid, timeout=20)).status == "FAILED"  # still declined

            await server.client.create_schedule("nightly", flow, {}, cron="0 3 * * *")

            def pause_and_trigger() -> tuple[str, str]:
                browser.get(f"{base}/schedules")
                row = 'tr[data-schedule="nightly"]'
                wait_for(browser, row)
                confirm(browser, f"{row} button.schedule-pause", "ada")
                # the 2 s refresh may replace the row between finding and reading it: read again
                WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
                    lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute("data-paused") == "true"
                )
                confirm(browser, f"{row} button.schedule-trigger", "ada")
                shot(browser, f"schedules-{store}")
                nav = browser.find_element(By.CSS_SELECTOR, 'header a[href="/schedules"]').get_attribute(
                    "class"
                )
                text = stable(browser, lambda d: str(d.find_element(By.CSS_SELECTOR, row).text))
                return text, str(nav)

            text, nav = await asyncio.to_thread(pause_and_trigger)
            assert "paused" in text and nav == "on"
            schedule = await server.client.get_schedule("nightly")
            assert schedule.paused

            async def triggered() -> bool:
                return bool((await server.client.list(correlation_id="schedule:nightly"))[0])

            await until(triggered)
