"""Shared by the dashboard tests: a server with its HTTP port, workflows with real instances."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle.testing import EmbeddedServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
async def dashboard_server(store: str, schema: str, url: str) -> AsyncIterator[tuple[EmbeddedServer, str]]:
    """An embedded server with its HTTP port on; yields (server, base URL)."""
    settings: dict[str, Any] = {"http_port": free_port()}
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
