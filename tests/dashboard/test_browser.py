"""The dashboard in a real browser: Debian's chromium driven by selenium through chromedriver.

Each page is opened against a server with real instances; the tests click cancel and complete a
user task through the confirmation dialog, check the outcome in the store and the graph's node
states, read the Queues page's limits of queues held at their limits (tests/limited_queues.py),
and save a screenshot of every page in SCREENSHOTS (printed by .ci/run; CI artifacts).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from limited_queues import LONG_LEASE_MILLIS, hold_limited_queues
from mixed_fleet_versions import mixed_versions
from pg import TEST_DATABASE_URL
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from wiggle import ExecutionMode
from wiggle._server.web.times import utc_text

from .helpers import click, dashboard_server, orders, until

CHROMIUM = os.environ.get("WIGGLE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("WIGGLE_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(
    os.environ.get(
        "WIGGLE_SCREENSHOTS", Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
    )
)


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """A headless chromium (missing chromium is a failure: .ci/run installs it)."""
    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), (
        f"the browser tests need {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver"
    )
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: webdriver.Chrome, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def wait_for(driver: webdriver.Chrome, css: str, timeout: float = 20) -> Any:
    return WebDriverWait(driver, timeout).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def node_state(driver: webdriver.Chrome, node: str) -> str:
    """The graph's state of ``node`` (read again if the 2 s refresh replaced the graph meanwhile)."""

    def read(d: webdriver.Chrome) -> str:
        return str(d.find_element(By.CSS_SELECTOR, f'g.node[data-node="{node}"]').get_attribute("data-state"))

    state: str = WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: read(d) or "unreached"
    )
    return "" if state == "unreached" else state


def stable(driver: webdriver.Chrome, read: Any) -> Any:
    """``read(driver)``, read again if the 2 s refresh replaced what it found before it was read."""
    return WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,)).until(read)


def confirm(driver: webdriver.Chrome, button_css: str, actor: str) -> None:
    """Click an action, fill in who, confirm (the dialog closes once the server accepted it)."""
    click(driver, button_css)
    dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
    field = dialog.find_element(By.ID, "actor")
    field.clear()
    field.send_keys(actor)
    dialog.find_element(By.ID, "confirm-yes").click()
    WebDriverWait(driver, 20).until(ec.invisibility_of_element_located((By.ID, "confirm")))


async def test_every_page_and_the_actions_in_a_browser(
    browser: webdriver.Chrome, store: str, pg_schema: str
) -> None:
    flow = orders(f"browser-orders-{store}", ExecutionMode.LOCAL_SYNC)
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with server.worker([flow]):
            declined = (
                await server.client.start(flow, {"declined": True}, correlation_id="order-1")
            ).instance_id
            victim = (await server.client.start(flow, {}, correlation_id="order-2")).instance_id
            approved = (await server.client.start(flow, {}, correlation_id="order-3")).instance_id

            async def awaiting() -> bool:
                infos = [await server.client.get(i) for i in (declined, victim, approved)]
                return all(any(t.status == "AWAITING" for t in i.tokens) for i in infos)

            await until(awaiting)
            await server.client.complete_user_task(declined, "approve", {"ok": True})
            assert (await server.client.wait(declined, timeout=20)).status == "FAILED"

            def instances_page() -> tuple[int, str]:
                browser.get(f"{base}/instances?workflow={flow.name}")
                wait_for(browser, "tr[data-id]")
                rows, running = stable(
                    browser,
                    lambda d: (
                        d.find_elements(By.CSS_SELECTOR, "tbody tr[data-id]"),
                        d.find_element(By.CSS_SELECTOR, 'a[data-count="RUNNING"]').text,
                    ),
                )
                shot(browser, f"instances-{store}")
                return len(rows), running

            rows, running = await asyncio.to_thread(instances_page)
            assert rows == 3 and running == "running 2"

            def failed_instance() -> dict[str, str]:
                browser.get(f"{base}/instances/{declined}")
                wait_for(browser, "svg.graph")
                states = {n: node_state(browser, n) for n in ("validate", "approve", "charge", "ship")}

                def read(d: webdriver.Chrome) -> tuple[str, str]:  # again if a refresh replaced them
                    tracebacks = d.find_elements(By.CSS_SELECTOR, "#history pre.tb")
                    return str(len(tracebacks)), tracebacks[-1].text if tracebacks else ""

                states["tracebacks"], states["last"] = stable(browser, read)
                shot(browser, f"instance-failed-{store}")
                return states

            seen = await asyncio.to_thread(failed_instance)
            assert (seen["validate"], seen["approve"], seen["charge"], seen["ship"]) == (
                "done",
                "done",
                "failed",
                "",
            )
            assert seen["tracebacks"] == "2" and seen["last"].rstrip().endswith("RuntimeError: card declined")

            def cancel_in_browser() -> str:
                browser.get(f"{base}/instances/{victim}")
                wait_for(browser, "svg.graph")
                before = node_state(browser, "approve")
                confirm(browser, "button#cancel", "ada")
                return before

            assert await asyncio.to_thread(cancel_in_browser) == "awaiting"
            info = await server.client.get(victim)
            assert info.status == "CANCELLED" and info.reason == "cancelled from the dashboard"
            operator = [e for e in await server.client.history(victim) if e.kind == "OPERATOR"]
            assert len(operator) == 1 and operator[0].worker_id.startswith("ada (dashboard")

            def refreshed() -> tuple[str, bool]:
                # the page refreshes itself (no reload): the status pill and the history follow
                WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
                    lambda d: (
                        "CANCELLED" in d.find_element(By.ID, "main").text
                        and d.find_elements(By.CSS_SELECTOR, "#history tr.h-CANCELLED")
                    )
                )
                shot(browser, f"instance-cancelled-{store}")

                def read(d: webdriver.Chrome) -> tuple[str, bool]:  # again if a refresh replaced it
                    return d.find_element(By.CSS_SELECTOR, "#main .pill").text, bool(
                        d.find_elements(By.CSS_SELECTOR, "button#cancel")
                    )

                seen: tuple[str, bool] = stable(browser, read)
                return seen

            pill, still_cancellable = await asyncio.to_thread(refreshed)
            assert pill == "CANCELLED" and not still_cancellable

            def complete_in_browser() -> None:
                browser.get(f"{base}/instances/{approved}")
                wait_for(browser, "svg.graph")
                confirm(browser, 'button.complete-task[data-task="approve"]', "grace")

            await asyncio.to_thread(complete_in_browser)
            done = await server.client.wait(approved, timeout=20)
            assert done.status == "COMPLETED" and done.context["shipped"] is True

            def graph_done() -> list[str]:
                WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
                    lambda d: node_state(d, "ship") == "done"
                )
                shot(browser, f"instance-completed-{store}")
                return [node_state(browser, n) for n in ("validate", "approve", "charge", "ship")]

            assert await asyncio.to_thread(graph_done) == ["done"] * 4

            def other_pages() -> dict[str, str]:
                texts = {}
                for page in ("workflows", "queues", "cluster"):
                    browser.get(f"{base}/{page}")
                    wait_for(browser, "#main h2")
                    texts[page] = browser.find_element(By.ID, "main").text
                    shot(browser, f"{page}-{store}")
                return texts

            texts = await asyncio.to_thread(other_pages)
            assert flow.name in texts["workflows"] and "LOCAL_SYNC" in texts["workflows"]
            assert flow.name in texts["queues"]
            assert "ready" in texts["cluster"] and "leader" in texts["cluster"]


async def test_the_queues_page_shows_flow_control_in_a_browser(
    browser: webdriver.Chrome, store: str, pg_schema: str
) -> None:
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL, lease_millis=LONG_LEASE_MILLIS) as (
        server,
        base,
    ):
        scene = await hold_limited_queues(server.client, f"browser-limits-{store}")

        def cells(d: webdriver.Chrome) -> dict[str, tuple[str, str]]:
            return {
                q: (
                    d.find_element(By.CSS_SELECTOR, f'tr[data-queue="{q}"] td.limits').text,
                    d.find_element(By.CSS_SELECTOR, f'tr[data-queue="{q}"] td.slots').text,
                )
                for q in (scene.keyed, scene.rated)
            }

        def queues_page() -> tuple[dict[str, tuple[str, str]], str]:
            browser.get(f"{base}/queues")
            wait_for(browser, f'tr[data-queue="{scene.rated}"] td.limits')
            seen = stable(browser, cells)
            shot(browser, f"queues-limits-{store}")
            click(browser, "button#tz")  # local time: the browser's zone, with its offset
            local = stable(browser, lambda d: d.find_element(By.CSS_SELECTOR, "td.limits time").text)
            click(browser, "button#tz")  # and back to UTC
            return seen, local

        seen, local = await asyncio.to_thread(queues_page)
        assert seen[scene.keyed] == (
            "max running 3 (2 in use)",
            "2 held\n2 waiting",
        )
        rate, waits = seen[scene.rated][0].split("\n")
        assert rate == "rate 1 / 1 h" and seen[scene.rated][1] == "-", seen
        assert waits.startswith(f"rate limited until {utc_text(scene.rate_limited_until)} (in "), waits
        assert waits.endswith(" min)") or waits.endswith(" h)"), waits
        assert "Z" not in local and ("+" in local or "-" in local[10:]), local


async def test_the_queues_page_shows_a_worker_passing_a_node_over_in_a_browser(
    browser: webdriver.Chrome, store: str, pg_schema: str
) -> None:
    """An old worker gave back a new version's new step: its row on the Queues page says which."""
    old, new = mixed_versions(f"browser-passes-over-{store}")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(new)
        await server.client.start(new, {})
        async with server.worker([old]) as worker:

            async def noted() -> bool:
                return bool(server.server.instances.delivery.unrunnable.holds(worker.worker_id))

            await until(noted)

            def queues_page() -> str:
                browser.get(f"{base}/queues")
                text = stable(
                    browser,
                    lambda d: (
                        d.find_element(By.CSS_SELECTOR, f'tr[data-queue="{old.name}"] .passes-over').text
                    ),
                )
                shot(browser, f"queues-passes-over-{store}")
                return str(text)

            text = await asyncio.to_thread(queues_page)
        assert text.startswith(f"no handler: passes over extra of {new.name} version {new.version}"), text
        assert "(offered again in " in text and text.endswith(" s)"), text
