"""A step's history entry spans its own run in every mode (docs/semantics.md#history). In a
LOCAL_ASYNC batch every step but the first showed 0 ms and the first the whole batch, in the
history and in ``wiggle_step_duration_seconds`` (an outside operator trial): the worker now sends
each step's run time with the batch (AdvanceRun ``step_millis``)."""

from __future__ import annotations

import time

from .conftest import Harness

SLEEPS = {"a": 0.05, "b": 0.3, "c": 0.12}


def _sleeper(name: str):
    def run(ctx):
        time.sleep(SLEEPS[name])
        return {**ctx, name: True}

    return run


async def test_each_step_s_history_entry_spans_its_own_run(harness: Harness) -> None:
    bp = (
        harness.define("step-times")
        .step(_sleeper("a"), name="a")
        .step(_sleeper("b"), name="b")
        .step(_sleeper("c"), name="c")
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done
    spans = {h.node_id: h.ended_at - h.started_at for h in history if h.kind == "TASK"}
    for name, seconds in SLEEPS.items():
        # at least its own sleep (the bug gave every step but the first 0 ms); the upper bound
        # is a sanity bound only, for a loaded machine stretches a 50 ms step to 400 ms
        assert seconds * 1000 - 5 <= spans[name] < seconds * 1000 + 2000, (name, spans, history)
    entries = [h for h in history if h.kind == "TASK"]
    for earlier, later in zip(entries, entries[1:], strict=False):
        # one after the other: with each at least its own sleep, no entry holds its neighbours'
        # run (the first held the whole batch)
        assert earlier.ended_at <= later.started_at + 5, entries
