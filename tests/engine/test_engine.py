"""Engine transitions, driven directly through the memory store (no gRPC).

Every refused request must change nothing: those tests compare a deep snapshot of the instance,
its tokens, its history and the store's transaction count before and after.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest

from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle._clock import VirtualClock
from wiggle._engine.engine import Engine, EngineConfig
from wiggle._engine.records import ContextSet, PredicateDone, StepFailed, TaskDone
from wiggle._engine.state import Changes, HistoryOutcome, InstanceStatus, TokenStatus, now_millis
from wiggle._limits import PAYLOAD_REMEDY
from wiggle._server.instances import Instances
from wiggle._storage.base import InstanceQuery
from wiggle._storage.memory import MemoryStore
from wiggle.errors import AlreadyFinished, FailedPrecondition, InvalidArgument, NotFound

LEASE = 5_000
OWNER = "worker-1"


def _h(name: str):
    def handler(ctx):
        return ctx

    handler.__name__ = name
    return handler


def store(**config: Any) -> Instances:
    """The instance layer over a fresh memory store."""
    config.setdefault("lease_millis", LEASE)
    return Instances(MemoryStore(), Engine(EngineConfig(**config), rng=random.Random(42)))


async def started(s: Instances, workflow: Workflow[Any], context: dict[str, Any] | None = None):
    bp = workflow.build()
    await s.register(bp.definition)
    view = await s.start(bp.name, "", context or {}, "")
    return bp, view.instance.id


async def claim_one(s: Instances, queue: str, owner: str = OWNER):
    claimed = await s.claim(owner, [queue], 1)
    assert len(claimed) == 1, f"nothing claimable on {queue!r}"
    return claimed[0]


async def snapshot(s: Instances, instance_id: str) -> tuple[Any, ...]:
    view = await s.get_instance(instance_id)
    history = await s.history(instance_id)
    return (
        msgspec.to_builtins(view.instance),
        sorted((msgspec.to_builtins(t) for t in view.tokens), key=lambda t: t["id"]),
        msgspec.to_builtins(history),
        s.stats.transactions,
    )


async def tokens(s: Instances, instance_id: str):
    return (await s.get_instance(instance_id)).tokens


def linear(name: str = "lin", mode: ExecutionMode = ExecutionMode.SERVER, retry: RetryPolicy | None = None):
    wf = Workflow.define(name).execution(mode)
    if retry is not None:
        wf = wf.retry(retry)
    return wf.step(_h("a")).step(_h("b")).step(_h("c"))


# ---------------------------------------------------------------------------- start, claim, complete


async def test_start_parks_the_first_step_ready() -> None:
    s = store()
    bp, iid = await started(s, linear(), {"n": 1})
    view = await s.get_instance(iid)
    assert view.instance.status == "RUNNING"
    assert view.instance.version == bp.version
    assert view.instance.context == {"n": 1}
    [tok] = view.tokens
    assert (tok.node_id, tok.status, tok.queue, tok.attempt) == ("a", "READY", "lin", 1)
    assert tok.available_at <= now_millis()
    assert iid.startswith("wi-") and tok.id.startswith(iid)
    # the engine speaks the enums (each equal to its plain string on the wire)
    assert view.instance.status is InstanceStatus.RUNNING and tok.status is TokenStatus.READY


async def test_start_rejects_a_bad_context_and_stores_nothing() -> None:
    s = store(max_payload_bytes=100)
    bp = linear().build()
    await s.register(bp.definition)
    with pytest.raises(InvalidArgument, match="limit is 100"):
        await s.start(bp.name, "", {"x": "y" * 200}, "")
    with pytest.raises(InvalidArgument, match="JSON object"):
        await s.start(bp.name, "", [1, 2], "")  # type: ignore[arg-type]
    with pytest.raises(NotFound, match="'nope'"):
        await s.start("nope", "", {}, "")
    with pytest.raises(NotFound, match="no version"):
        await s.start(bp.name, "0" * 16, {}, "")
    assert (await s.list_instances(InstanceQuery()))[0] == []


async def test_claim_complete_moves_through_the_steps() -> None:
    s = store()
    _, iid = await started(s, linear(), {"n": 0})
    for node, n in (("a", 1), ("b", 2), ("c", 3)):
        claimed = await claim_one(s, "lin")
        tok = claimed.token
        assert (tok.node_id, tok.status, tok.lease_owner) == (node, "RUNNING", OWNER)
        assert tok.lease_expires_at >= now_millis() + LEASE - 50
        assert claimed.execution_mode == "SERVER"
        assert claimed.context == {"n": n - 1}
        assert await s.claim("worker-2", ["lin"], 5) == []  # one token, one holder
        status = await s.complete(tok.id, OWNER, {"n": n}, None)
    assert status == "COMPLETED"
    view = await s.get_instance(iid)
    assert view.instance.context == {"n": 3}
    assert view.instance.status == "COMPLETED"
    assert view.tokens == []
    history = await s.history(iid)
    assert [(e.node_id, e.outcome) for e in history] == [
        ("a", "COMPLETED"),
        ("b", "COMPLETED"),
        ("c", "COMPLETED"),
        ("end", "END"),
    ]
    assert [type(e.outcome) for e in history] == [HistoryOutcome] * 4
    assert all(e.worker_id == OWNER for e in history[:3])


async def test_complete_with_none_keeps_the_context() -> None:
    s = store()
    _, iid = await started(s, linear(), {"keep": True})
    claimed = await claim_one(s, "lin")
    await s.complete(claimed.token.id, OWNER, None, None)
    assert (await s.get_instance(iid)).instance.context == {"keep": True}


async def test_claim_ignores_other_queues_and_is_oldest_first() -> None:
    s = store()
    _, first = await started(s, linear())
    _, second = await started(s, linear())
    assert await s.claim(OWNER, ["elsewhere"], 5) == []
    both = await s.claim(OWNER, ["lin"], 5)
    assert [c.instance.id for c in both] == [first, second]


async def test_reports_refused_when_not_the_lease_holder() -> None:
    s = store()
    _, iid = await started(s, linear())
    claimed = await claim_one(s, "lin")
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition, match="leased to another worker, not 'intruder'"):
        await s.complete(claimed.token.id, "intruder", {"x": 1}, None)
    with pytest.raises(FailedPrecondition):
        await s.fail(claimed.token.id, "intruder", "no", True)
    with pytest.raises(FailedPrecondition):
        await s.heartbeat(claimed.token.id, "intruder")
    with pytest.raises(FailedPrecondition):
        await s.advance_run(claimed.token.id, "intruder", [TaskDone("a", {"x": 1}, [])], False, "")
    assert await snapshot(s, iid) == before


async def test_duplicate_report_is_refused_and_changes_nothing() -> None:
    s = store()
    _, iid = await started(s, linear())
    claimed = await claim_one(s, "lin")
    await s.complete(claimed.token.id, OWNER, {"x": 1}, None)
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition, match="READY, not RUNNING"):
        await s.complete(claimed.token.id, OWNER, {"x": 2}, None)
    assert await snapshot(s, iid) == before


async def test_unknown_token_is_not_found() -> None:
    s = store()
    with pytest.raises(NotFound):
        await s.complete("wi-000000000000000000000000.1", OWNER, {}, None)


async def test_predicate_reported_as_a_task_is_invalid() -> None:
    # refused like the converse below: a malformed report changes nothing (it used to fail the
    # instance for good); the step stays leased to its worker, which may report its branch
    s = store()
    wf = Workflow.define("pred").gate(_h("ok")).step(_h("after"))
    _, iid = await started(s, wf)
    claimed = await claim_one(s, "pred")
    before = await snapshot(s, iid)
    with pytest.raises(InvalidArgument, match="'ok' is a PREDICATE, not a TASK: send predicate_value"):
        await s.complete(claimed.token.id, OWNER, {"x": 1}, None)
    assert await snapshot(s, iid) == before
    await s.complete(claimed.token.id, OWNER, None, True)
    assert (await s.get_instance(iid)).instance.status == "RUNNING"


async def test_task_reported_with_a_predicate_value_is_invalid() -> None:
    s = store()
    _, iid = await started(s, linear())
    claimed = await claim_one(s, "lin")
    before = await snapshot(s, iid)
    with pytest.raises(InvalidArgument, match="not a PREDICATE"):
        await s.complete(claimed.token.id, OWNER, None, True)
    assert await snapshot(s, iid) == before


async def test_oversize_step_result_fails_the_step_for_good() -> None:
    s = store(max_payload_bytes=100)
    _, iid = await started(s, linear(retry=RetryPolicy.fixed(5, 0)))
    claimed = await claim_one(s, "lin")
    await s.complete(claimed.token.id, OWNER, {"x": "y" * 200}, None)
    inst = (await s.get_instance(iid)).instance
    assert inst.status == "FAILED"
    assert inst.error.startswith("a: step result is ")
    assert inst.error.endswith("the limit is 100 bytes" + PAYLOAD_REMEDY)  # names the setting
    assert inst.context == {}


# ---------------------------------------------------------------------------- failure and retry


async def test_fail_with_attempts_left_is_a_delayed_retry() -> None:
    s = store()
    _, iid = await started(s, linear(retry=RetryPolicy.fixed(3, 5)))
    claimed = await claim_one(s, "lin")
    t0 = now_millis()
    assert await s.fail(claimed.token.id, OWNER, "flaky", True) == "RUNNING"
    [tok] = await tokens(s, iid)
    assert (tok.status, tok.node_id, tok.attempt, tok.last_error, tok.lease_owner) == (
        "READY",
        "a",
        2,
        "flaky",
        "",
    )
    assert t0 + 5_000 <= tok.available_at <= now_millis() + 5_000
    assert await s.claim(OWNER, ["lin"], 1) == []  # not due yet
    assert await s.next_ready_at(["lin"]) == tok.available_at
    history = await s.history(iid)
    assert [(e.node_id, e.outcome, e.attempt, e.error) for e in history] == [("a", "RETRY", 1, "flaky")]


async def test_retry_backoff_grows_exponentially() -> None:
    s = store()
    policy = RetryPolicy(max_attempts=5, initial_backoff_millis=1000, multiplier=3.0, max_backoff_millis=5000)
    bp, iid = await started(s, linear(retry=policy))
    state = s.store._instances[iid]  # drive the engine directly to control the clock
    loaded = s.store._loaded(state)
    engine = s.engine
    now = now_millis()
    token_id = next(iter(state.tokens))
    delays = []
    for _ in range(4):
        engine.claim(loaded, state, state.tokens[token_id], OWNER, now, Changes())
        engine.fail(loaded, state, token_id, OWNER, "again", True, now)
        delays.append(state.tokens[token_id].available_at - now)
        now = state.tokens[token_id].available_at
    assert delays == [1000, 3000, 5000, 5000]
    assert state.tokens[token_id].attempt == 5


async def test_retry_becomes_claimable_when_due() -> None:
    s = store()
    _, iid = await started(s, linear(retry=RetryPolicy.fixed(3, 0.03)))
    claimed = await claim_one(s, "lin")
    await s.fail(claimed.token.id, OWNER, "flaky", True)
    await asyncio.sleep(0.05)
    again = await claim_one(s, "lin", "worker-2")
    assert (again.token.id, again.token.attempt, again.token.lease_owner) == (claimed.token.id, 2, "worker-2")


async def test_exhausted_retries_fail_the_instance() -> None:
    s = store()
    _, iid = await started(s, linear(retry=RetryPolicy.fixed(2, 0)))
    for _ in range(2):
        claimed = await claim_one(s, "lin")
        status = await s.fail(claimed.token.id, OWNER, "it broke", True)
    assert status == "FAILED"
    view = await s.get_instance(iid)
    assert view.instance.error == "a: it broke"
    assert view.tokens == []
    history = await s.history(iid)
    assert [(e.outcome, e.attempt) for e in history] == [("RETRY", 1), ("FAILED", 2)]


async def test_non_retryable_failure_fails_at_once() -> None:
    s = store()
    _, iid = await started(s, linear(retry=RetryPolicy.fixed(5, 0)))
    claimed = await claim_one(s, "lin")
    assert await s.fail(claimed.token.id, OWNER, "declined", False) == "FAILED"
    assert (await s.get_instance(iid)).instance.error == "a: declined"


async def test_failing_one_branch_cancels_the_others() -> None:
    s = store()
    wf = (
        Workflow.define("forky")
        .retry(RetryPolicy.none())
        .fork(lambda b: b.step(_h("x")), lambda b: b.step(_h("y")))
        .join()
    )
    _, iid = await started(s, wf)
    both = await s.claim(OWNER, ["forky"], 2)
    assert sorted(c.token.node_id for c in both) == ["x", "y"]
    x = next(c for c in both if c.token.node_id == "x")
    y = next(c for c in both if c.token.node_id == "y")
    await s.fail(x.token.id, OWNER, "bad", True)
    view = await s.get_instance(iid)
    assert view.instance.status == "FAILED" and view.instance.error == "x: bad"
    assert view.tokens == []
    with pytest.raises(AlreadyFinished) as err:
        await s.complete(y.token.id, OWNER, {}, None)
    assert err.value.instance_status == "FAILED"


# ---------------------------------------------------------------------------- leases


async def test_heartbeat_extends_the_lease() -> None:
    s = store()
    _, iid = await started(s, linear())
    claimed = await claim_one(s, "lin")
    first_expiry = claimed.token.lease_expires_at
    state = s.store._instances[iid]  # the engine itself, with a controlled clock
    later = first_expiry + 1234
    expires, changes = s.engine.heartbeat(s.store._loaded(state), state, claimed.token.id, OWNER, later)
    assert expires == later + LEASE
    assert list(changes.tokens) == [claimed.token.id]
    status, expires = await s.heartbeat(claimed.token.id, OWNER)  # through the store, real clock
    assert status == "RUNNING"
    assert now_millis() + LEASE - 50 <= expires <= now_millis() + LEASE
    [tok] = await tokens(s, iid)
    assert (tok.status, tok.lease_owner, tok.lease_expires_at) == ("RUNNING", OWNER, expires)


async def test_lease_expiry_is_a_failed_attempt() -> None:
    s = store()
    _, iid = await started(s, linear(retry=RetryPolicy.fixed(3, 0)))
    claimed = await claim_one(s, "lin")
    expiry = claimed.token.lease_expires_at  # (the store hands out its live token object)
    assert await s.run_clock_duties(now_millis()) == 0  # not yet
    assert await s.next_due_at() == expiry
    assert await s.run_clock_duties(expiry) == 1
    [tok] = await tokens(s, iid)
    assert (tok.status, tok.attempt, tok.last_error, tok.lease_owner) == (
        "READY",
        2,
        "lease expired (worker unreachable)",
        "",
    )
    history = await s.history(iid)
    assert [(e.outcome, e.error, e.worker_id) for e in history] == [
        ("RETRY", "lease expired (worker unreachable)", OWNER)
    ]
    assert tok.available_at == expiry  # backoff 0: due at once
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition, match="not RUNNING"):  # the old holder's late report
        await s.complete(claimed.token.id, OWNER, {"late": True}, None)
    assert await snapshot(s, iid) == before


async def test_heartbeat_postpones_expiry() -> None:
    s = store()
    _, iid = await started(s, linear())
    claimed = await claim_one(s, "lin")
    old_expiry = claimed.token.lease_expires_at
    await asyncio.sleep(0.005)
    _, new_expiry = await s.heartbeat(claimed.token.id, OWNER)
    assert new_expiry > old_expiry
    assert await s.run_clock_duties(old_expiry) == 0  # the stale timer entry is ignored
    assert [t.status for t in await tokens(s, iid)] == ["RUNNING"]
    assert await s.run_clock_duties(new_expiry) == 1


async def test_last_attempt_lost_to_lease_expiry_fails_the_instance() -> None:
    s = store()
    _, iid = await started(s, linear(retry=RetryPolicy.none()))
    claimed = await claim_one(s, "lin")
    await s.run_clock_duties(claimed.token.lease_expires_at + 1)
    inst = (await s.get_instance(iid)).instance
    assert inst.status == "FAILED"
    assert inst.error == "a: lease expired (worker unreachable)"


# ---------------------------------------------------------------------------- cancel, gate, end, timers


async def test_cancel_running_instance() -> None:
    s = store()
    _, iid = await started(s, linear(), {"v": 1})
    claimed = await claim_one(s, "lin")
    view, changed = await s.cancel(iid, "stop it")
    assert changed
    assert (view.instance.status, view.instance.reason, view.instance.context) == (
        "CANCELLED",
        "stop it",
        {"v": 1},
    )
    assert view.tokens == []
    before = await snapshot(s, iid)
    with pytest.raises(AlreadyFinished) as err:
        await s.complete(claimed.token.id, OWNER, {"v": 2}, None)
    assert "CANCELLED" in str(err.value)
    with pytest.raises(AlreadyFinished):
        await s.heartbeat(claimed.token.id, OWNER)
    view2, changed2 = await s.cancel(iid, "again")
    assert not changed2 and view2.instance.reason == "stop it"
    assert await snapshot(s, iid) == before
    assert await s.claim(OWNER, ["lin"], 5) == []
    assert await s.run_clock_duties(now_millis() + 10 * LEASE) == 0


async def test_gate_false_ends_completed_with_reason() -> None:
    s = store()
    wf = Workflow.define("gated").gate(_h("ok")).step(_h("after"))
    _, iid = await started(s, wf)
    claimed = await claim_one(s, "gated")
    assert await s.complete(claimed.token.id, OWNER, None, False) == "COMPLETED"
    inst = (await s.get_instance(iid)).instance
    assert (inst.status, inst.reason, inst.error) == ("COMPLETED", "gated:ok", "")


async def test_gate_true_continues() -> None:
    s = store()
    wf = Workflow.define("gated").gate(_h("ok")).step(_h("after"))
    _, iid = await started(s, wf)
    claimed = await claim_one(s, "gated")
    assert await s.complete(claimed.token.id, OWNER, None, True) == "RUNNING"
    assert [t.node_id for t in await tokens(s, iid)] == ["after"]


async def test_end_with_failure() -> None:
    s = store()
    wf = Workflow.define("ends").step(_h("a")).end("no luck", success=False)
    _, iid = await started(s, wf)
    claimed = await claim_one(s, "ends")
    assert await s.complete(claimed.token.id, OWNER, None, None) == "FAILED"
    inst = (await s.get_instance(iid)).instance
    assert (inst.status, inst.reason) == ("FAILED", "no luck")


async def test_sleep_fires_once_never_early() -> None:
    s = store()
    wf = Workflow.define("nap").step(_h("a")).sleep("zz", 10).step(_h("b"))
    _, iid = await started(s, wf)
    claimed = await claim_one(s, "nap")
    await s.complete(claimed.token.id, OWNER, None, None)
    [tok] = await tokens(s, iid)
    assert tok.status == "WAITING"
    due = tok.available_at
    assert await s.run_clock_duties(due - 1) == 0
    assert [t.status for t in await tokens(s, iid)] == ["WAITING"]
    assert await s.run_clock_duties(due) == 1
    assert [(t.node_id, t.status) for t in await tokens(s, iid)] == [("b", "READY")]
    assert await s.run_clock_duties(due + 100_000) == 0  # exactly once


async def test_user_task_complete_and_deadline() -> None:
    s = store()
    wf = Workflow.define("ut").user_task("approval", timeout=60).step(_h("after"))
    _, iid = await started(s, wf, {"a": 1})
    [tok] = await tokens(s, iid)
    assert tok.status == "AWAITING"
    with pytest.raises(NotFound) as unknown:
        await s.complete_user_task(iid, "other", {})
    assert str(unknown.value) == "workflow 'ut' has no user task 'other'; its user tasks: 'approval'"
    with pytest.raises(NotFound) as misspelt:  # a typo is named with the task it likely meant
        await s.complete_user_task(iid, "aproval", {})
    assert "has no user task 'aproval' (did you mean 'approval'?); its user tasks: 'approval'" in str(
        misspelt.value
    )
    with pytest.raises(NotFound) as not_a_task:
        await s.complete_user_task(iid, "after", {})
    assert "has no user task 'after'" in str(not_a_task.value)
    view = await s.complete_user_task(iid, "approval", {"ok": True})
    assert view.instance.context == {"a": 1, "ok": True}
    assert [(t.node_id, t.status) for t in view.tokens] == [("after", "READY")]
    assert await s.run_clock_duties(tok.available_at + 1) == 0  # the deadline is moot now

    _, iid2 = await started(s, wf)
    [tok2] = await tokens(s, iid2)
    await s.run_clock_duties(tok2.available_at)
    inst = (await s.get_instance(iid2)).instance
    assert (inst.status, inst.error) == ("FAILED", "user task 'approval' timed out")


async def test_runaway_loop_is_stopped() -> None:
    s = store(max_instance_steps=5)
    wf = Workflow.define("spin").loop(_h("more"), lambda b: b.step(_h("body")))
    _, iid = await started(s, wf)
    for _ in range(10):
        claimed = await s.claim(OWNER, ["spin"], 1)
        if not claimed:
            break
        c = claimed[0]
        if c.token.node_id == "more":
            await s.complete(c.token.id, OWNER, None, True)
        else:
            await s.complete(c.token.id, OWNER, None, None)
    inst = (await s.get_instance(iid)).instance
    assert inst.status == "FAILED"
    assert "runaway" in inst.error


# ---------------------------------------------------------------------------- advance_run


def local_flow(mode: ExecutionMode = ExecutionMode.LOCAL_SYNC, retry: RetryPolicy | None = None):
    """a -> ok? (false: gated) -> b -> c -> nap (sleep) -> d -> e@other -> end"""
    wf = Workflow.define("run").execution(mode)
    if retry is not None:
        wf = wf.retry(retry)
    return (
        wf.step(_h("a"))
        .gate(_h("ok"))
        .step(_h("b"))
        .step(_h("c"))
        .sleep("nap", 60)
        .step(_h("d"))
        .step(_h("e"), queue="other")
    )


async def local_claim(s: Instances, mode: ExecutionMode = ExecutionMode.LOCAL_SYNC, context=None, retry=None):
    _, iid = await started(s, local_flow(mode, retry), context or {"n": 0})
    claimed = await claim_one(s, "run")
    assert claimed.execution_mode == mode.value
    return iid, claimed.token.id


@pytest.mark.parametrize(
    "steps, fragment",
    [
        pytest.param([TaskDone("b", {"x": 1}, [])], "reports node 'b'", id="wrong-first-node"),
        pytest.param(
            [TaskDone("a", {"x": 1}, []), TaskDone("b", {}, [])], "reports node 'b'", id="skipped-predicate"
        ),
        pytest.param(
            [TaskDone("a", {}, []), PredicateDone("ok", False), TaskDone("b", {}, [])],
            "'gated.ok'",
            id="gated-branch",
        ),
        pytest.param([TaskDone("a", {}, []), TaskDone("ok", {}, [])], "PREDICATE", id="predicate-as-task"),
        pytest.param([PredicateDone("a", True)], "is a TASK", id="task-as-predicate"),
        pytest.param(
            [StepFailed("a", "x", True), PredicateDone("ok", True)],
            "more steps follow",
            id="failure-not-last",
        ),
        pytest.param(
            [
                TaskDone("a", {}, []),
                PredicateDone("ok", True),
                TaskDone("b", {}, []),
                TaskDone("c", {}, []),
                TaskDone("nap", {}, []),
            ],
            "boundary",
            id="past-a-boundary",
        ),
        pytest.param([TaskDone("end", {}, [])], "reports node 'end'", id="end"),
    ],
)
async def test_advance_rejects_a_bogus_path_and_applies_nothing(steps, fragment: str) -> None:
    s = store()
    iid, token_id = await local_claim(s)
    before = await snapshot(s, iid)
    for final in (False, True):
        with pytest.raises(FailedPrecondition) as err:
            await s.advance_run(token_id, OWNER, steps, final, "")
        assert fragment in str(err.value)
        assert await snapshot(s, iid) == before


async def test_advance_hands_back_at_a_queue_change() -> None:
    # The steps before the queue change stand; the token is ready on its own queue, its attempt not
    # consumed, and leased to nobody (docs/semantics.md#chaining-across-queues).
    s = store()
    _, iid = await started(
        s, Workflow.define("q").execution(ExecutionMode.LOCAL_SYNC).step(_h("a")).step(_h("b"), queue="other")
    )
    task_id = (await claim_one(s, "q")).task_id
    outcome = await s.advance_run(
        task_id, OWNER, [TaskDone("a", {"a": 1}, []), TaskDone("b", {"b": 1}, [])], False, ""
    )
    assert (outcome.instance_status, outcome.token_status, outcome.applied_steps) == ("RUNNING", "READY", 1)
    view = await s.get_instance(iid)
    (token,) = view.tokens
    assert (token.node_id, token.queue, token.status, token.attempt, token.lease_owner) == (
        "b",
        "other",
        "READY",
        1,
        "",
    )
    assert view.instance.context == {"a": 1}
    assert [(h.node_id, h.outcome) for h in await s.history(iid)] == [("a", "COMPLETED")]
    claimed = await claim_one(s, "other", owner="worker-2")
    assert claimed.token.node_id == "b"


async def test_a_run_that_ends_before_a_queue_change_is_handed_back_there() -> None:
    # A non-final AdvanceRun whose next step is on another queue: the server hands back, the
    # token is not left leased to the worker.
    s = store()
    _, iid = await started(
        s,
        Workflow.define("q2").execution(ExecutionMode.LOCAL_ASYNC).step(_h("a")).step(_h("b"), queue="other"),
    )
    task_id = (await claim_one(s, "q2")).task_id
    outcome = await s.advance_run(task_id, OWNER, [TaskDone("a", {}, [])], False, "")
    assert (outcome.token_status, outcome.applied_steps) == ("READY", 1)
    (token,) = (await s.get_instance(iid)).tokens
    assert (token.node_id, token.status, token.lease_owner, token.local_run_owner) == ("b", "READY", "", "")


async def test_advance_rejects_the_branch_the_predicate_did_not_choose() -> None:
    s = store()
    wf = (
        Workflow.define("ch")
        .execution(ExecutionMode.LOCAL_SYNC)
        .choose(_h("big"), if_true=lambda b: b.step(_h("review")), if_false=lambda b: b.step(_h("auto")))
    )
    _, iid = await started(s, wf)
    token_id = (await claim_one(s, "ch")).token.id
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition, match="reports node 'review' but task .* is at 'auto'"):
        await s.advance_run(
            token_id, OWNER, [PredicateDone("big", False), TaskDone("review", {"r": 1}, [])], True, ""
        )
    assert await snapshot(s, iid) == before
    outcome = await s.advance_run(
        token_id, OWNER, [PredicateDone("big", False), TaskDone("auto", {"a": 1}, [])], True, ""
    )
    assert outcome.instance_status == "COMPLETED"
    assert (await s.get_instance(iid)).instance.context == {"a": 1}


async def test_advance_not_final_keeps_the_token_running_and_renews_the_lease() -> None:
    s = store()
    iid, token_id = await local_claim(s)
    t0 = now_millis()
    outcome = await s.advance_run(
        token_id, OWNER, [TaskDone("a", {"n": 1}, []), PredicateDone("ok", True)], False, ""
    )
    assert (outcome.instance_status, outcome.token_status, outcome.applied_steps) == ("RUNNING", "RUNNING", 2)
    assert outcome.lease_expires_at >= t0 + LEASE
    view = await s.get_instance(iid)
    [tok] = view.tokens
    assert (tok.id, tok.node_id, tok.status, tok.lease_owner) == (token_id, "b", "RUNNING", OWNER)
    assert tok.lease_expires_at == outcome.lease_expires_at
    assert tok.local_run_owner == OWNER and tok.local_run_steps == 2
    assert view.instance.context == {"n": 1}
    assert await s.claim("worker-2", ["run"], 1) == []  # still held
    # the old lease's timer is stale; only the renewed expiry counts
    assert await s.run_clock_duties(outcome.lease_expires_at - 1) == 0
    history = await s.history(iid)
    assert [(e.node_id, e.outcome, e.worker_id) for e in history] == [
        ("a", "COMPLETED", OWNER),
        ("ok", "COMPLETED", OWNER),
    ]
    # the next report continues from b
    outcome = await s.advance_run(token_id, OWNER, [TaskDone("b", {"b": True}, ["n"])], False, "")
    assert outcome.token_status == "RUNNING"
    assert (await s.get_instance(iid)).instance.context == {"b": True}


async def test_advance_final_parks_at_the_boundary() -> None:
    s = store()
    iid, token_id = await local_claim(s, ExecutionMode.LOCAL_ASYNC)
    steps = [
        TaskDone("a", {"n": 1}, []),
        PredicateDone("ok", True),
        TaskDone("b", {"b": 1}, []),
        ContextSet("c", {"n": 1, "b": 1, "c": 1}),
    ]
    outcome = await s.advance_run(token_id, OWNER, steps, True, "SLEEP")
    assert (outcome.instance_status, outcome.token_status, outcome.applied_steps) == ("RUNNING", "WAITING", 4)
    assert outcome.lease_expires_at == 0
    view = await s.get_instance(iid)
    [tok] = view.tokens
    assert (tok.node_id, tok.status, tok.lease_owner, tok.local_run_owner) == ("nap", "WAITING", "", "")
    assert view.instance.context == {"n": 1, "b": 1, "c": 1}
    assert len(await s.history(iid)) == 4


@pytest.mark.parametrize(
    "steps, final",
    [
        pytest.param([TaskDone("a", {"n": 1}, []), TaskDone("b", {"n": 2}, [])], True, id="two-steps"),
        pytest.param([TaskDone("a", {"n": 1}, []), TaskDone("b", {"n": 2}, [])], False, id="two-not-final"),
        pytest.param([TaskDone("a", {"n": 1}, [])], False, id="one-not-final"),
        pytest.param([], False, id="none-not-final"),
    ],
)
async def test_advance_in_server_mode_is_one_step_per_claim(steps, final: bool) -> None:
    # issue #14: a SERVER-mode token must not run ahead, whatever the worker sends.
    s = store()
    _, iid = await started(s, linear(), {"n": 0})
    claimed = await claim_one(s, "lin")
    assert claimed.execution_mode == "SERVER"
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition) as err:
        await s.advance_run(claimed.token.id, OWNER, steps, final, "")
    assert "execution mode SERVER: one step per claim" in str(err.value)
    assert "Nothing was applied" in str(err.value)
    assert await snapshot(s, iid) == before
    # the one step, final, is what CompleteTask would do: applied, and the claim ends
    outcome = await s.advance_run(claimed.token.id, OWNER, [TaskDone("a", {"n": 1}, [])], True, "")
    assert (outcome.token_status, outcome.applied_steps, outcome.lease_expires_at) == ("READY", 1, 0)
    view = await s.get_instance(iid)
    [tok] = view.tokens
    assert (tok.node_id, tok.status, tok.lease_owner) == ("b", "READY", "")
    assert view.instance.context == {"n": 1}


async def test_advance_in_a_default_mode_workflow_follows_the_server_mode() -> None:
    s = store(execution_mode=ExecutionMode.SERVER)
    _, iid = await started(s, linear(mode=ExecutionMode.DEFAULT), {"n": 0})
    claimed = await claim_one(s, "lin")
    with pytest.raises(FailedPrecondition, match="execution mode SERVER"):
        await s.advance_run(claimed.token.id, OWNER, [TaskDone("a", {}, []), TaskDone("b", {}, [])], True, "")


async def test_advance_final_before_a_same_queue_step_makes_it_ready() -> None:
    s = store()
    iid, token_id = await local_claim(s)
    outcome = await s.advance_run(token_id, OWNER, [TaskDone("a", {}, [])], True, "SHUTDOWN")
    assert outcome.token_status == "READY"
    [tok] = await tokens(s, iid)
    assert (tok.node_id, tok.status, tok.lease_owner, tok.attempt) == ("ok", "READY", "", 1)
    again = await claim_one(s, "run", "worker-2")
    assert again.token.node_id == "ok"


async def test_advance_final_to_end_completes() -> None:
    s = store()
    wf = Workflow.define("short").execution(ExecutionMode.LOCAL_ASYNC).step(_h("a")).step(_h("b"))
    _, iid = await started(s, wf, {"x": 0})
    token_id = (await claim_one(s, "short")).token.id
    outcome = await s.advance_run(
        token_id, OWNER, [TaskDone("a", {"x": 1}, []), TaskDone("b", {"y": 2}, ["x"])], True, "TERMINAL"
    )
    assert (outcome.instance_status, outcome.applied_steps) == ("COMPLETED", 2)
    inst = (await s.get_instance(iid)).instance
    assert inst.status == "COMPLETED" and inst.context == {"y": 2}


async def test_advance_gate_false_in_a_batch_ends_the_instance() -> None:
    s = store()
    iid, token_id = await local_claim(s)
    outcome = await s.advance_run(
        token_id, OWNER, [TaskDone("a", {"n": 5}, []), PredicateDone("ok", False)], True, "TERMINAL"
    )
    assert outcome.instance_status == "COMPLETED"
    inst = (await s.get_instance(iid)).instance
    assert (inst.reason, inst.context) == ("gated:ok", {"n": 5})


async def test_advance_failure_applies_the_prefix_then_retries() -> None:
    s = store()
    iid, token_id = await local_claim(s, retry=RetryPolicy.fixed(3, 5))
    t0 = now_millis()
    steps = [
        TaskDone("a", {"n": 1}, []),
        PredicateDone("ok", True),
        StepFailed("b", "ValueError: boom", True),
    ]
    outcome = await s.advance_run(token_id, OWNER, steps, True, "RETRY")
    assert (outcome.instance_status, outcome.token_status, outcome.applied_steps) == ("RUNNING", "READY", 2)
    view = await s.get_instance(iid)
    assert view.instance.context == {"n": 1}
    [tok] = view.tokens
    assert (tok.node_id, tok.status, tok.attempt, tok.last_error, tok.lease_owner) == (
        "b",
        "READY",
        2,
        "ValueError: boom",
        "",
    )
    assert tok.available_at >= t0 + 5000
    history = await s.history(iid)
    assert [(e.node_id, e.outcome, e.error) for e in history] == [
        ("a", "COMPLETED", ""),
        ("ok", "COMPLETED", ""),
        ("b", "RETRY", "ValueError: boom"),
    ]


async def test_advance_failure_exhausted_fails_like_fail_task() -> None:
    s = store()
    iid, token_id = await local_claim(s, retry=RetryPolicy.fixed(3, 5))
    steps = [
        TaskDone("a", {"n": 1}, []),
        PredicateDone("ok", True),
        StepFailed("b", "PermanentError: no", False),
    ]
    outcome = await s.advance_run(token_id, OWNER, steps, True, "RETRY")
    assert outcome.instance_status == "FAILED"
    view = await s.get_instance(iid)
    assert (view.instance.error, view.instance.context, view.tokens) == (
        "b: PermanentError: no",
        {"n": 1},
        [],
    )


async def test_advance_oversize_step_fails_that_step_after_the_prefix() -> None:
    s = store(max_payload_bytes=100)
    iid, token_id = await local_claim(s, retry=RetryPolicy.fixed(3, 0))
    steps = [
        TaskDone("a", {"n": 1}, []),
        PredicateDone("ok", True),
        TaskDone("b", {"blob": "x" * 200}, []),
        TaskDone("c", {"c": 1}, []),
    ]
    outcome = await s.advance_run(token_id, OWNER, steps, False, "")
    assert outcome.instance_status == "FAILED"
    inst = (await s.get_instance(iid)).instance
    assert inst.error.startswith("b: step result is ") and inst.error.endswith(
        "the limit is 100 bytes" + PAYLOAD_REMEDY
    )
    assert inst.context == {"n": 1}


async def test_advance_on_a_cancelled_instance_returns_its_status_and_applies_nothing() -> None:
    s = store()
    iid, token_id = await local_claim(s)
    await s.cancel(iid, "bye")
    before = await snapshot(s, iid)
    for final in (False, True):
        outcome = await s.advance_run(token_id, OWNER, [TaskDone("a", {"n": 9}, [])], final, "")
        assert outcome.instance_status == "CANCELLED"
        assert outcome.applied_steps == 0
        before_tx = before[:3]
        assert (await snapshot(s, iid))[:3] == before_tx
    inst = (await s.get_instance(iid)).instance
    assert (inst.status, inst.reason, inst.context) == ("CANCELLED", "bye", {"n": 0})


async def test_advance_empty_batch_is_a_heartbeat() -> None:
    s = store()
    iid, token_id = await local_claim(s)
    outcome = await s.advance_run(token_id, OWNER, [], False, "")
    assert (outcome.token_status, outcome.applied_steps) == ("RUNNING", 0)
    [tok] = await tokens(s, iid)
    assert (tok.node_id, tok.status, tok.lease_expires_at) == ("a", "RUNNING", outcome.lease_expires_at)
    assert await s.history(iid) == []


async def test_advance_after_lease_expiry_is_refused() -> None:
    s = store()
    iid, token_id = await local_claim(s, retry=RetryPolicy.fixed(3, 0))
    [tok] = await tokens(s, iid)
    await s.run_clock_duties(tok.lease_expires_at)
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition, match="not RUNNING"):
        await s.advance_run(token_id, OWNER, [TaskDone("a", {"n": 1}, [])], True, "")
    assert await snapshot(s, iid) == before


def timed_flow(mode: ExecutionMode):
    """a (a 5 s time limit) -> b -> c, in ``mode``."""
    wf = Workflow.define(f"timed-{mode.value.lower()}").execution(mode)
    return wf.step(_h("a"), timeout=5).step(_h("b")).step(_h("c"))


@pytest.mark.parametrize(
    "mode, steps, durations",
    [
        pytest.param(ExecutionMode.LOCAL_SYNC, [TaskDone("a", {"a": 1}, [])], (), id="sync-one-step"),
        pytest.param(ExecutionMode.LOCAL_ASYNC, [TaskDone("a", {"a": 1}, [])], (), id="async-one-step"),
        pytest.param(
            ExecutionMode.LOCAL_ASYNC,
            [TaskDone("a", {"a": 1}, []), TaskDone("b", {"b": 1}, [])],
            (5_500, 100),
            id="async-first-step-late",
        ),
        pytest.param(ExecutionMode.LOCAL_SYNC, [StepFailed("a", "boom", True)], (), id="late-failure"),
        pytest.param(ExecutionMode.LOCAL_ASYNC, [], (), id="lease-renewal"),
    ],
)
async def test_a_local_run_reported_past_its_steps_time_limit_is_refused(
    mode: ExecutionMode, steps: list[Any], durations: tuple[int, ...]
) -> None:
    # A late AdvanceRun was applied until the timeout sweep came round, where a late CompleteTask
    # is refused (an outside audit): the attempt timed out whichever report comes first.
    clock = VirtualClock()
    s = Instances(MemoryStore(), Engine(EngineConfig(lease_millis=60_000), rng=random.Random(42)), clock)
    _, iid = await started(s, timed_flow(mode))
    task_id = (await claim_one(s, timed_flow(mode).build().name)).task_id
    clock.advance(6_000)  # past a's 5 s limit; the clock duties have not run
    before = await snapshot(s, iid)
    with pytest.raises(FailedPrecondition, match="timed out: its attempt passed its time limit at node 'a'"):
        await s.advance_run(task_id, OWNER, steps, False, "", run_offset=0, durations=durations)
    assert await snapshot(s, iid) == before
    assert await s.run_clock_duties(clock.now()) == 1  # the sweep applies the timeout: a retry
    (entry,) = await s.history(iid)
    assert (entry.node_id, entry.outcome) == ("a", "RETRY") and "start-to-close" in entry.error


async def test_a_local_run_whose_first_step_ended_in_time_is_applied_however_late_its_flush() -> None:
    clock = VirtualClock()
    s = Instances(MemoryStore(), Engine(EngineConfig(lease_millis=60_000), rng=random.Random(42)), clock)
    flow = timed_flow(ExecutionMode.LOCAL_ASYNC)
    _, iid = await started(s, flow)
    task_id = (await claim_one(s, flow.build().name)).task_id
    clock.advance(8_000)  # a took 1 s, b 7 s: the flush comes past a's limit, a did not
    steps = [TaskDone("a", {"a": 1}, []), TaskDone("b", {"b": 1}, [])]
    outcome = await s.advance_run(task_id, OWNER, steps, False, "", run_offset=0, durations=(1_000, 7_000))
    assert outcome.applied_steps == 2
    assert [(h.node_id, h.outcome) for h in await s.history(iid)] == [("a", "COMPLETED"), ("b", "COMPLETED")]


async def test_a_batch_of_several_steps_without_run_times_is_not_refused_by_its_clock() -> None:
    # an older worker, or another language's, sends no run times: when its first step ended is
    # unknown, so the flush is applied (docs/semantics.md#step-time-limits)
    clock = VirtualClock()
    s = Instances(MemoryStore(), Engine(EngineConfig(lease_millis=60_000), rng=random.Random(42)), clock)
    flow = timed_flow(ExecutionMode.LOCAL_ASYNC)
    await started(s, flow)
    task_id = (await claim_one(s, flow.build().name)).task_id
    clock.advance(8_000)
    steps = [TaskDone("a", {"a": 1}, []), TaskDone("b", {"b": 1}, [])]
    outcome = await s.advance_run(task_id, OWNER, steps, False, "", run_offset=0)
    assert outcome.applied_steps == 2


async def test_a_handback_that_chains_its_own_token_answers_its_status_after_the_commit() -> None:
    # The reply said READY beside a next_task that is the same token, leased to the caller (an
    # outside audit); the answer to the same batch resent says RUNNING: both say RUNNING now.
    s = store()
    flow = Workflow.define("hb").execution(ExecutionMode.LOCAL_SYNC).step(_h("a")).step(_h("b"), queue="q2")
    _, iid = await started(s, flow)
    task_id = (await claim_one(s, "hb")).task_id
    args = ([TaskDone("a", {"a": 1}, [])], True, "OTHER_QUEUE")
    queues = frozenset({"hb", "q2"})
    first = await s.advance_run(task_id, OWNER, *args, run_offset=0, next_queues=queues)
    assert first.chained is not None and first.chained.token.node_id == "b"
    assert first.token_status == TokenStatus.RUNNING == first.chained.token.status
    resent = await s.advance_run(task_id, OWNER, *args, run_offset=0, next_queues=queues)
    assert resent.token_status == first.token_status and resent.chained.task_id == first.chained.task_id
    (token,) = await tokens(s, iid)
    assert (token.node_id, token.status, token.lease_owner) == ("b", "RUNNING", OWNER)
