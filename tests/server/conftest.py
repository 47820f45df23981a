"""Fixtures shared by the server tests: an embedded server serving the module's ``FLOW``, and
starts that go on the stream and through the batcher whatever the process's tracing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from wiggle import _tracing as wiggle_tracing
from wiggle.testing import EmbeddedServer


@pytest.fixture
async def server(request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedServer]:
    """An in-memory embedded server with the test module's ``FLOW`` registered (a module with a
    server of its own defines its own ``server`` fixture)."""
    async with EmbeddedServer() as server:
        await server.client.register(request.module.FLOW)
        yield server


@pytest.fixture
def no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start under an active trace is a unary call of its own (it carries the trace context);
    with this, starts go on the stream and through the batcher, as in a process without a
    TracerProvider (``pytestmark = pytest.mark.usefixtures("no_tracing")``)."""
    monkeypatch.setattr(wiggle_tracing, "active", lambda: False)
