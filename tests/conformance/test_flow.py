"""Control flow: linear runs, gates, choices, loops and sleeps (docs/semantics.md#node-kinds)."""

from __future__ import annotations

from wiggle import Step

from .conftest import Harness


async def test_linear(harness: Harness, trace) -> None:
    def a(ctx):
        trace.hit("a")
        return {**ctx, "n": ctx["n"] + 1, "trail": [*ctx["trail"], "a"]}

    def b(ctx):
        trace.hit("b")
        return {**ctx, "n": ctx["n"] * 10, "trail": [*ctx["trail"], "b"]}

    async def c(ctx):  # an async handler in the same run
        trace.hit("c")
        return {**ctx, "trail": [*ctx["trail"], "c"], "mode": Step.current().execution_mode}

    bp = harness.define("linear").step(a).step(b).step(c).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"n": 1, "trail": []})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED"
    assert done.reason == "" and done.error == ""
    assert done.context == {"n": 20, "trail": ["a", "b", "c"], "mode": harness.mode.value}
    assert trace.steps == ["a", "b", "c"]
    assert done.tokens == ()


async def test_integers_past_64_bits_round_trip_in_a_context(harness: Harness, trace) -> None:
    """JSON numbers have no size limit, nor do the contexts. On PostgreSQL, an integer past 64 bits
    made the server's copy of the instance (wiggle/_storage/postgres/state_cache.py) fail after
    the commit: the start was answered INTERNAL though made, and a step's report likewise, the
    instance then stuck RUNNING."""
    huge = 12345678901234567890123

    def checksum(ctx):
        trace.hit("checksum")
        return {**ctx, "checksum": 2**64, "negative": -(2**70)}

    def ship(ctx):
        trace.hit("ship")
        return {**ctx, "shipped": ctx["checksum"] + 1}

    bp = harness.define("big-ints").step(checksum).step(ship).build()
    async with harness.running([bp]) as (server, _):
        request_id = f"{bp.name}-1"  # the PostgreSQL schema is the session's: one id per run
        info = await server.client.start(bp, {"order": huge}, request_id=request_id)
        again = await server.client.start(bp, {"order": huge}, request_id=request_id)
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert again.instance_id == info.instance_id
    assert done.status == "COMPLETED", done
    assert done.context == {"order": huge, "checksum": 2**64, "negative": -(2**70), "shipped": 2**64 + 1}
    assert trace.steps == ["checksum", "ship"]
    assert all(e.attempt == 1 and "lease" not in e.error for e in history), history


async def test_handler_returning_none_leaves_context_unchanged(harness: Harness, trace) -> None:
    def look(ctx):
        trace.hit("look")
        return None

    def add(ctx):
        trace.hit("add")
        ctx["added"] = True
        return ctx

    bp = harness.define("none-result").step(look).step(add).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"keep": 1})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"keep": 1, "added": True}
    assert trace.steps == ["look", "add"]


async def _run_gate(harness: Harness, trace, go: bool):
    def ok(ctx):
        trace.hit("ok")
        return ctx["go"]

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = harness.define("gate").gate(ok).step(after).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"go": go})
        return await harness.finish(server, info.instance_id)


async def test_gate_true_continues(harness: Harness, trace) -> None:
    done = await _run_gate(harness, trace, True)
    assert done.status == "COMPLETED"
    assert done.reason == "" and done.error == ""
    assert done.context == {"go": True, "after": True}
    assert trace.steps == ["ok", "after"]


async def test_gate_false_completes_with_gated_reason(harness: Harness, trace) -> None:
    done = await _run_gate(harness, trace, False)
    assert done.status == "COMPLETED"
    assert done.reason == "gated:ok"
    assert done.error == ""
    assert done.context == {"go": False}
    assert trace.steps == ["ok"]


async def test_predicate_returning_non_bool_fails_without_retry(harness: Harness, trace) -> None:
    def sloppy(ctx):
        trace.hit("sloppy")
        return "yes"

    bp = harness.define("non-bool").gate(sloppy).step(lambda c: c, name="after").build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error.startswith("sloppy: ")
    assert "str" in done.error
    assert trace.steps == ["sloppy"]  # non-retryable: one attempt only


async def _run_choose(harness: Harness, trace, amount: int):
    def big(ctx):
        trace.hit("big")
        return ctx["amount"] > 100

    def review(ctx):
        trace.hit("review")
        return {**ctx, "path": "review"}

    def auto(ctx):
        trace.hit("auto")
        return {**ctx, "path": "auto"}

    def done(ctx):
        trace.hit("done")
        return {**ctx, "done": True}

    bp = (
        harness.define("choose")
        .choose(big, if_true=lambda b: b.step(review), if_false=lambda b: b.step(auto))
        .step(done)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"amount": amount})
        return await harness.finish(server, info.instance_id)


async def test_choose_true_branch(harness: Harness, trace) -> None:
    done = await _run_choose(harness, trace, 500)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"amount": 500, "path": "review", "done": True}
    assert trace.steps == ["big", "review", "done"]


async def test_choose_false_branch(harness: Harness, trace) -> None:
    done = await _run_choose(harness, trace, 5)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"amount": 5, "path": "auto", "done": True}
    assert trace.steps == ["big", "auto", "done"]


async def test_loop_runs_body_until_predicate_is_false(harness: Harness, trace) -> None:
    def more(ctx):
        trace.hit("more")
        return ctx["i"] < 3

    def inc(ctx):
        trace.hit("inc")
        return {**ctx, "i": ctx["i"] + 1, "seen": [*ctx["seen"], ctx["i"]]}

    def finish(ctx):
        trace.hit("finish")
        return {**ctx, "finished": True}

    bp = harness.define("loop").loop(more, lambda b: b.step(inc)).step(finish).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"i": 0, "seen": []})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"i": 3, "seen": [0, 1, 2], "finished": True}
    assert trace.steps == ["more", "inc", "more", "inc", "more", "inc", "more", "finish"]
    # every pass through the loop is a fresh first attempt
    assert trace.attempts["more"] == [1, 1, 1, 1]


async def test_the_runaway_guard_keeps_the_context_of_every_step_the_history_records(
    harness: Harness, trace
) -> None:
    """A loop that never exits is failed by the runaway guard (``max_instance_steps``); the steps
    the history records as COMPLETED are the ones the context holds, in every mode. In
    LOCAL_ASYNC a batch that ran past the guard recorded its steps and kept none of their
    contexts (wiggle/_engine/local_runs.py ``_apply_steps``), so a retry started from a context
    that did not match the history."""

    def forever(ctx):
        return True

    def inc(ctx):
        trace.hit("inc")
        return {**ctx, "n": ctx["n"] + 1}

    bp = harness.define("runaway").loop(forever, lambda b: b.step(inc)).build()
    async with harness.running([bp], max_instance_steps=50) as (server, _):
        info = await server.client.start(bp, {"n": 0})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED" and "runaway: more than 50 steps" in done.error, done
    completed = [e for e in history if e.node_id == "inc" and e.outcome == "COMPLETED"]
    assert len(completed) == 25  # the guard counts the predicate's steps too: 25 of each, then one
    assert done.context == {"n": 25}


async def test_end_with_failure_fails_the_instance_with_its_reason(harness: Harness, trace) -> None:
    def check(ctx):
        trace.hit("check")
        return ctx["ok"]

    def never(ctx):
        trace.hit("never")
        return ctx

    bp = (
        harness.define("end-failure")
        .choose(check, if_true=lambda b: b, if_false=lambda b: b.end("rejected by check", success=False))
        .step(never)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"ok": False})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.reason == "rejected by check"
    assert trace.steps == ["check"]


async def test_sleep_continues_after_the_duration_never_early(harness: Harness, trace) -> None:
    def before(ctx):
        trace.hit("before")
        return {**ctx, "before": True}

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    # Virtual time (the test kit): the clock moves only when advanced, so "never early" is exact.
    bp = harness.define("sleep").step(before).sleep("nap", 3600).step(after).build()
    async with harness.env([bp], time_skipping=False) as env:
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "nap")
        await env.advance(3600 - 0.001)  # one millisecond short of the sleep's end
        assert [(t.node_id, t.status) for t in (await env.client.get(info.instance_id)).tokens] == [
            ("nap", "WAITING")
        ]
        await env.advance(0.001)
        done = await env.wait(info)
        history = await env.history(info)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"before": True, "after": True}
    assert trace.steps == ["before", "after"]
    ended = next(e.ended_at for e in history if e.node_id == "before")
    started = next(e.started_at for e in history if e.node_id == "after")
    assert started - ended == 3_600_000  # the sleep took exactly its duration
    assert [e.node_id for e in history if e.node_id == "nap"] == ["nap"]  # fired exactly once
