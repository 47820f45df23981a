"""Shared by the dashboard tests: a server with its HTTP port, workflows with real instances."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from ports import free_port

from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle.testing import EmbeddedServer


def validate(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "valid": True}


def charge(ctx: dict[str, Any]) -> dict[str, Any]:
    if ctx.get("declined"):
        raise RuntimeError("card declined")
    return {**ctx, "charged": True}


def ship(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "shipped": True}


def orders(name: str, mode: ExecutionMode = ExecutionMode.SERVER) -> Any:
    """validate -> approve (user task) -> charge (2 attempts) -> ship."""
    return (
        Workflow.define(name)
        .execution(mode)
        .step(validate)
        .user_task("approve", timeout=timedelta(hours=1))
        .step(charge, retry=RetryPolicy.fixed(2, 0.01))
        .step(ship)
        .build()
    )


@contextlib.asynccontextmanager
async def dashboard_server(
    store: str, schema: str, url: str, **more: Any
) -> AsyncIterator[tuple[EmbeddedServer, str]]:
    """An embedded server with its HTTP port on (and the settings ``more``); yields (server, base URL)."""
    settings: dict[str, Any] = {"http_port": free_port(), **more}
    if store == "postgres":
        settings.update(database_url=url, database_schema=schema)
    async with EmbeddedServer(**settings) as server:
        yield server, f"http://127.0.0.1:{server.server.http_port}"


async def until(check: Any, timeout: float = 20.0) -> None:
    """Wait until the async ``check()`` is true (fails the test after ``timeout`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"still not true after {timeout} s: {check.__doc__ or check}"
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------- TLS, identities, browsers

CHROMIUM = os.environ.get("WIGGLE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("WIGGLE_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(
    os.environ.get(
        "WIGGLE_SCREENSHOTS", Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
    )
)


def start_chromium(insecure_certs: bool = False) -> Any:
    """A headless chromium (missing chromium is a failure: .ci/run installs it). ``insecure_certs``:
    trust the test CA's server certificate (made at test time, unknown to the system)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), (
        f"the browser tests need {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver"
    )
    options = Options()
    options.binary_location = CHROMIUM
    options.accept_insecure_certs = insecure_certs
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


def screenshot(driver: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def csp_violations(driver: Any) -> list[str]:
    """The browser console's Content-Security-Policy complaints since the last call."""
    return [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]


@contextlib.asynccontextmanager
async def secured_server(
    store: str, schema: str, url: str, pki: Any, **more: Any
) -> AsyncIterator[tuple[WiggleServer, str]]:
    """A server with TLS, the identity file of ``pki`` and its HTTP port; yields (server, base URL)."""
    settings: dict[str, Any] = {
        "port": 0,
        "http_port": free_port(),
        "tls_cert": str(pki.server_cert),
        "tls_key": str(pki.server_key),
        "auth_file": str(pki.auth_file),
        **more,
    }
    if store == "postgres":
        settings.update(database_url=url, database_schema=schema)
    server = WiggleServer(ServerConfig(**settings))
    await server.start()
    try:
        yield server, f"https://127.0.0.1:{server.http_port}"
    finally:
        await server.stop(grace=0.5)


@contextlib.asynccontextmanager
async def page_server(html: str, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """Another site: a second HTTP server on another loopback port serving ``html`` at /; its origin."""
    from aiohttp import web

    async def page(_request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context).start()
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def tls_client(pki: Any) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca.ca_file))


async def call(
    method: str,
    url: str,
    context: ssl.SSLContext | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """One request (JSON ``body``); (status, headers, JSON answer or text). No cookie jar: cookies
    go in ``headers`` as a browser would send them."""
    import aiohttp

    sent = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        async with http.request(
            method,
            url,
            data=data,
            headers=sent,
            ssl=context if context is not None else False,
            allow_redirects=False,
        ) as r:
            text = await r.text()
            try:
                answer: Any = json.loads(text)
            except ValueError:
                answer = text
            return r.status, r.headers, answer


def across_navigation(condition: Any) -> Any:
    """``condition`` for a WebDriverWait that a page's own navigation (a sign-in's or a sign-out's
    ``location.assign``) may interrupt: chromedriver then aborts the find ("aborted by
    navigation"), which is "not yet", not a failure; any other error still fails the wait."""
    from selenium.common.exceptions import WebDriverException

    def check(driver: Any) -> Any:
        try:
            return condition(driver)
        except WebDriverException as exc:
            if "aborted by navigation" in str(exc.msg or ""):
                return False
            raise

    return check


def click(driver: Any, css: str, timeout: float = 20) -> None:
    """Click the element ``css`` once it is there. The pages refresh their ``<main>`` every 2 s,
    which may replace the element between finding and clicking it: find it again then."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def clicked(d: Any) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(clicked)
