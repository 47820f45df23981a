"""``path`` / ``assert_path`` count each visit once, however parallel branches interleave their
history entries (wiggle/_testing/helpers.py, ``path_of``). Merging consecutive entries only, a
fork's step retried after the other branch's step ran was counted twice (``['fork', 'flaky',
'other', 'flaky', 'join', 'end']``), and a for_each of 3 sub-workflows gave 6 visits (an outside
trial)."""

from __future__ import annotations

from typing import Any

from wiggle import RetryPolicy, Workflow
from wiggle.client import HistoryEntry
from wiggle.testing import WorkflowEnvironment, path_of

from .conftest import Kit

FAILED_ONCE: set[str] = set()


def flaky(ctx: dict[str, Any]) -> dict[str, Any]:
    if ctx["run"] not in FAILED_ONCE:
        FAILED_ONCE.add(ctx["run"])
        raise RuntimeError("the first attempt fails")
    return {**ctx, "flaky": True}


def other(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "other": True}


def double(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "result": ctx["item"] * 2}


async def test_a_retried_step_in_a_fork_is_one_visit(kit: Kit) -> None:
    flow = (
        kit.define("path-fork")
        .fork(lambda b: b.step(flaky, retry=RetryPolicy.fixed(3, 5.0)), lambda b: b.step(other))
        .join()
        .build()
    )
    async with kit.env([flow]) as env:
        done = await env.run(flow, {"run": flow.name})
        entries = [(e.node_id, e.outcome) for e in await env.history(done)]
        assert entries.index(("other", "COMPLETED")) < entries.index(("flaky", "COMPLETED"))  # interleaved
        path = await env.path(done)  # the branches' first entries come in either order
        assert path in (["fork", "flaky", "other", "join", "end"], ["fork", "other", "flaky", "join", "end"])


async def test_a_for_each_of_sub_workflows_visits_its_body_once_per_item(kit: Kit) -> None:
    child = kit.define("path-child").step(double).build()
    flow = kit.define("path-for-each").for_each("xs", lambda b: b.sub_workflow("k", child)).build()
    async with kit.env([child, flow]) as env:
        done = await env.run(flow, {"xs": [1, 2, 3]})
        assert done.context["results"] == [2, 4, 6]
        await env.assert_path(done, ["for_each", "k", "k", "k", "for_each.join", "end"])


def _entry(token: str, node: str, outcome: str = "COMPLETED") -> HistoryEntry:
    return HistoryEntry(token, node, "STEP", 1, "", 0, 0, outcome, "")


def test_a_token_that_comes_back_to_a_node_visits_it_again() -> None:
    history = [
        _entry("t.1", "check", "RETRY"),
        _entry("t.2", "side"),
        _entry("t.1", "check"),
        _entry("t.1", "fix"),
        _entry("t.1", "check"),  # a loop back: a new visit
    ]
    assert path_of(history) == ["check", "side", "fix", "check"]


async def test_a_sequential_path_is_unchanged() -> None:
    flow = Workflow.define("path-plain").step(other).step(double, name="d").build()
    async with WorkflowEnvironment([flow]) as env:
        done = await env.run(flow, {"item": 1})
        assert await env.path(done) == ["other", "d", "end"]
