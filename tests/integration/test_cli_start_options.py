"""``wiggle start`` with the flow-control options (docs/flow-control.md), as a user runs it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest

from wiggle import Workflow
from wiggle.testing import EmbeddedServer

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def served() -> AsyncIterator[tuple[EmbeddedServer, str]]:
    """A server on the memory store with one registered workflow (no worker: nothing runs)."""
    bp = Workflow.define(f"cli-opts-{uuid.uuid4().hex[:8]}", dict).step(lambda ctx: ctx, name="work").build()
    async with EmbeddedServer() as server:
        await server.client.register(bp)
        yield server, bp.name


async def wiggle(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "wiggle.cli", "--target", target, *args]
    return await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)


async def test_start_with_a_priority_and_a_delay_is_scheduled(served: tuple[EmbeddedServer, str]) -> None:
    server, name = served
    done = await wiggle(server.target, "start", name, "--priority", "5", "--start-delay", "2h", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["status"] == "SCHEDULED" and info["priority"] == 5
    # The delay counts from the server's receipt of the start; created_at is stamped when the
    # start commits, a moment later (docs/flow-control.md), so start_at may trail it by that moment.
    assert 0 <= info["created_at"] + 7_200_000 - info["start_at"] < 60_000
    at = await wiggle(server.target, "start", name, "--start-at", "2030-01-31T18:00:00Z", "--json")
    assert at.returncode == 0, at.stderr
    assert json.loads(at.stdout)["start_at"] == 1_896_112_800_000


async def test_start_with_a_dedup_key_returns_the_holder(served: tuple[EmbeddedServer, str]) -> None:
    server, name = served
    first = await wiggle(server.target, "start", name, "--dedup-key", "k", "--dedup-window", "15m", "--json")
    assert first.returncode == 0, first.stderr
    second = await wiggle(server.target, "start", name, "--dedup-key", "k")
    assert second.returncode == 0, second.stderr
    holder = json.loads(first.stdout)
    assert holder["dedup_window_millis"] == 900_000 and not holder["deduplicated"]
    assert f"deduplicated: {holder['instance_id']}" in second.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--start-at", "2099-01-31T18:00:00"], "no zone"),
        (["--start-delay=-5m"], "--start-delay must not be negative"),
        (["--start-delay", "soon"], "not a duration"),
        (["--start-at", "2099-01-31T18:00:00Z", "--start-delay", "5"], "not both"),
        (["--priority", "500"], "priority must be between -100 and 100"),
        (["--dedup-window", "5m"], "dedup_window needs a dedup_key"),
    ],
)
async def test_bad_start_options_exit_2_naming_the_option(
    served: tuple[EmbeddedServer, str], args: list[str], says: str
) -> None:
    server, name = served
    done = await wiggle(server.target, "start", name, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "INVALID_ARGUMENT" in done.stderr and says in done.stderr
    page, _ = await server.client.list(workflow=name)
    assert page == []
