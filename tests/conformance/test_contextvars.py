"""Every step's handler runs in its own copy of the worker's context (docs/workflows.md#contextvars-in-handlers),
in every mode on both stores, whether its handler is ``async def`` or sync (in the pool or inline):
what the program set before it started the worker is seen by every step, what a step sets is not
seen by the next. Found by an outside trial: a contextvar one step set was seen by the next step of
the same instance when it ran in the same task (chained on the same worker, or in a local run),
so what a step saw depended on where it ran."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest

from wiggle import Step

from .conftest import Harness

APP: contextvars.ContextVar[str] = contextvars.ContextVar("app", default="unset")
LEAKED: contextvars.ContextVar[str] = contextvars.ContextVar("leaked", default="unset")


def _seeing(name: str, seen: list[tuple[str, str, str, str]], is_async: bool) -> Any:
    """A handler that records what it sees (its Step's node, the program's var, the step's var)
    and then sets the step's var, as a handler setting a request id or a tenant would."""

    def look(ctx: dict[str, Any]) -> dict[str, Any]:
        seen.append((name, Step.current().node_id, APP.get(), LEAKED.get()))
        LEAKED.set(f"set by {name}")
        return {**ctx, name: True}

    async def look_async(ctx: dict[str, Any]) -> dict[str, Any]:
        return look(ctx)

    return look_async if is_async else look


@pytest.mark.parametrize(
    "handlers, sync_handlers",
    [("async", "auto"), ("sync", "thread"), ("sync", "inline"), ("mixed", "inline"), ("mixed", "thread")],
)
async def test_a_contextvar_a_step_sets_is_not_seen_by_the_next_step(
    harness: Harness, handlers: str, sync_handlers: str
) -> None:
    seen: list[tuple[str, str, str, str]] = []
    names = ["one", "two", "three", "four"]
    wf = harness.define("ctxvars")
    for index, name in enumerate(names):
        is_async = handlers == "async" or (handlers == "mixed" and index % 2 == 0)
        wf = wf.step(_seeing(name, seen, is_async), name=name)
    bp = wf.build()
    token = APP.set("set before the worker started")
    try:
        options = harness.options(sync_handlers=sync_handlers)
        async with harness.running([bp], options) as (server, _):
            info = await server.client.start(bp, {})
            done = await harness.finish(server, info.instance_id)
            again = await harness.finish(server, (await server.client.start(bp, {})).instance_id)
    finally:
        APP.reset(token)
    assert done.status == "COMPLETED" and again.status == "COMPLETED", (done, again)
    expected = [(name, name, "set before the worker started", "unset") for name in names]
    assert seen == expected + expected, seen
    assert LEAKED.get() == "unset"  # nor does it reach the program
