"""The night-shift fixes in a real browser (issue #26), in one pass to keep it quick: a signal
wait's own button sends the signal, times switch between UTC and the browser's zone, the refresh
keeps a typed filter and waits while the user types, the retry dialog names its node, a bulk
cancel shows its count before it acts, a triggered schedule names the instance it started.
Screenshots go to SCREENSHOTS like the other browser tests'."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from wiggle import Workflow

from .helpers import click, dashboard_server, until
from .test_browser import browser, shot, stable, wait_for  # noqa: F401  (browser: a fixture)


def noop(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def dialog_open(driver: webdriver.Chrome, button_css: str, actor: str) -> Any:
    """Click an action's button; the open dialog with who filled in."""
    click(driver, button_css)
    dialog = WebDriverWait(driver, 10).until(ec.visibility_of_element_located((By.ID, "confirm")))
    field = dialog.find_element(By.ID, "actor")
    field.clear()
    field.send_keys(actor)
    return dialog


def confirmed(driver: webdriver.Chrome, dialog: Any) -> str:
    """Confirm; the notice the page shows once the server accepted it."""
    dialog.find_element(By.ID, "confirm-yes").click()
    WebDriverWait(driver, 20).until(ec.invisibility_of_element_located((By.ID, "confirm")))
    return str(driver.find_element(By.ID, "notice").text)


def text_of(driver: webdriver.Chrome, css: str) -> str:
    def read(d: webdriver.Chrome) -> str:
        return str(d.find_element(By.CSS_SELECTOR, css).text)

    return str(WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,)).until(read))


async def test_the_night_shift_fixes_in_a_browser(browser: webdriver.Chrome) -> None:  # noqa: F811
    waits = (
        Workflow.define("browser-night-waits")
        .wait_signal("go", timeout=timedelta(hours=2))
        .user_task("hold")
        .build()
    )
    refused = Workflow.define("browser-night-refused").step(noop).end("refused", success=False).build()
    async with dashboard_server("memory", "", "") as (server, base):
        async with server.worker([refused]):
            await server.client.register(waits)
            iid = (await server.client.start(waits, {"customer_id": "c-1"})).instance_id
            others = [
                (await server.client.start(waits, {"customer_id": "c-2"})).instance_id for _ in range(2)
            ]
            rid = (await server.client.start(refused, {})).instance_id
            assert (await server.client.wait(rid, timeout=20)).status == "FAILED"

            async def all_waiting() -> bool:
                infos = [await server.client.get(i) for i in (iid, *others)]
                return all(any(t.status == "AWAITING" for t in i.tokens) for i in infos)

            await until(all_waiting)

            def signal_wait_and_times() -> tuple[str, str, str, str, str]:
                browser.get(f"{base}/instances/{iid}")
                wait_for(browser, "svg.graph")
                label = text_of(browser, 'g.node[data-node="go"] text.sub')
                times = text_of(browser, "#tokens td.times")
                shot(browser, "night-signal-wait")
                click(browser, "button#tz")  # local time: the browser's zone, with its offset
                local = text_of(browser, "#tokens td.times")
                click(browser, "button#tz")  # and back to UTC
                dialog = dialog_open(browser, 'button.send-signal[data-signal="go"]', "ada")
                name = str(dialog.find_element(By.ID, "signal-name").get_attribute("value"))
                data = dialog.find_element(By.ID, "data")
                data.clear()
                data.send_keys('{"ok": true}')
                return label, times, local, name, confirmed(browser, dialog)

            label, times, local, name, notice = await asyncio.to_thread(signal_wait_and_times)
            assert label.startswith("awaiting signal go")
            assert times.startswith("deadline ") and "Z (in " in times, times
            assert "Z" not in local.split("(")[0] and ("+" in local or "-" in local[20:]), local
            assert name == "go" and "DELIVERED" in notice, notice
            info = await server.client.get(iid)
            assert info.context["ok"] is True and [t.node_id for t in info.tokens] == ["hold"]

            def typed_filter_survives() -> tuple[str, str, str]:
                browser.get(f"{base}/instances?workflow={waits.name}")
                wait_for(browser, "tr[data-id]")
                # found and typed into again if the 2 s refresh replaced the form in between
                stable(
                    browser,
                    lambda d: (
                        d.find_element(By.CSS_SELECTOR, 'form.filters input[name="ctx"]').send_keys(
                            "customer_id = c-2"
                        )
                        or True
                    ),
                )
                time.sleep(3)  # a refresh tick or more while typing: it waits
                paused = text_of(browser, "#updated")
                click(browser, "#main h2")  # leave the box
                before = browser.find_element(By.ID, "main").get_attribute("data-refreshed") or ""
                WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
                    lambda d: (d.find_element(By.ID, "main").get_attribute("data-refreshed") or "") != before
                )
                kept = stable(
                    browser,
                    lambda d: d.find_element(By.CSS_SELECTOR, 'form.filters input[name="ctx"]').get_attribute(
                        "value"
                    ),
                )
                shot(browser, "night-instances-filters")
                return paused, str(kept), text_of(browser, "#updated")

            paused, kept, updated = await asyncio.to_thread(typed_filter_survives)
            assert paused == "refresh paused while you type or select"
            assert kept == "customer_id = c-2" and updated.startswith("updated ")

            def bulk_cancel() -> tuple[str, str]:
                click(browser, "form.filters button[type=submit]")
                WebDriverWait(browser, 20).until(lambda d: "ctx=" in d.current_url)
                dialog = dialog_open(browser, "button#bulk-cancel", "ada")
                count = WebDriverWait(
                    browser, 20, ignored_exceptions=(StaleElementReferenceException,)
                ).until(
                    lambda d: (
                        (t := d.find_element(By.CSS_SELECTOR, "#confirm .count").text)
                        and "will be" in t
                        and t
                    )
                )
                shot(browser, "night-bulk-cancel")
                return str(count), confirmed(browser, dialog)

            count, notice = await asyncio.to_thread(bulk_cancel)
            assert count == "2 instances will be cancelled.", count
            assert notice == "cancel: 2 of 2 done.", notice
            assert [(await server.client.get(i)).status for i in others] == ["CANCELLED"] * 2
            assert (await server.client.get(iid)).status == "RUNNING"

            def retry_from_a_node() -> tuple[list[str], str]:
                browser.get(f"{base}/instances/{rid}")
                wait_for(browser, "svg.graph")
                dialog = dialog_open(browser, "button#retry", "grace")
                select = Select(dialog.find_element(By.ID, "from-node"))
                options = [o.text for o in select.options]
                dialog.find_element(By.ID, "confirm-yes").click()  # no node chosen: refused in the dialog
                refusal = text_of(browser, "#confirm .err")
                select.select_by_value("noop")
                shot(browser, "night-retry-dialog")
                confirmed(browser, dialog)
                return options, refusal

            options, refusal = await asyncio.to_thread(retry_from_a_node)
            assert options == ["choose a node: it failed with no step in progress", "noop"], options
            assert refusal == "Choose the node to retry from."

            async def retried() -> bool:
                return any(e.kind == "RETRY" for e in await server.client.history(rid))

            await until(retried)
            [entry] = [e for e in await server.client.history(rid) if e.kind == "RETRY"]
            assert entry.node_id == "noop" and entry.worker_id.startswith("grace (dashboard")

            await server.client.create_schedule("night-sched", waits, {}, cron="0 3 * * *")

            def trigger() -> str:
                browser.get(f"{base}/schedules")
                wait_for(browser, 'tr[data-schedule="night-sched"]')
                dialog = dialog_open(
                    browser, 'tr[data-schedule="night-sched"] button.schedule-trigger', "ada"
                )
                confirmed(browser, dialog)
                wait_for(browser, "#started")
                shot(browser, "night-schedule-triggered")
                return text_of(browser, "#started")  # read again if a refresh replaced it

            started = await asyncio.to_thread(trigger)
            assert (await server.client.get(started)).schedule_id == "night-sched"
