"""Workflow-level concurrency limits, the pure parts (docs/flow-control.md#workflow-concurrency):
the definition's checks (define, build, a definition sent as JSON), its canonical form, and
``decide``, the admission rule of each strategy."""

from __future__ import annotations

import msgspec
import pytest

from wiggle import InvalidArgument, Limit, RateLimit, Workflow
from wiggle._engine.state import Instance, InstanceStatus
from wiggle._engine.workflow_limits import decide, waiting_reason
from wiggle._model import WorkflowDefinition, definition_from_json


def _step(ctx):
    return ctx


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        (
            Limit(key="a", strategy="drop"),
            "concurrency strategy 'drop' is not one of queue, cancel_newest, cancel_oldest",
        ),
        (Limit(key="a", max=0), "concurrency max must be at least 1, got 0"),
        (Limit(key="a", max=-3), "concurrency max"),
        (Limit(key=""), "a concurrency limit's key must name a context key"),
        (Limit(key="a" * 201), "a concurrency limit's key must name a context key"),
        (Limit(key="a", group="shared"), "a workflow's concurrency limit takes no group"),
    ],
)
def test_a_bad_workflow_limit_is_refused_at_define(limit: Limit, message: str) -> None:
    with pytest.raises(InvalidArgument, match="workflow 'sync'") as err:
        Workflow.define("sync", concurrency=limit)
    assert message in str(err.value)


@pytest.mark.parametrize("below", [0, -1, -1000])
def test_every_max_below_one_says_at_least_one(below: int) -> None:
    # a negative max was told "must be >= 0 (a limit of 0 would never run the step)", which the
    # refusal of 0 then contradicted (an outside trial); docs/flow-control.md's tables
    with pytest.raises(InvalidArgument) as err:
        Workflow.define("pay").step(_step, name="charge", concurrency=Limit(key="c", max=below)).build()
    assert str(err.value) == f"step 'charge': concurrency max must be at least 1, got {below}"
    with pytest.raises(InvalidArgument) as err:
        Workflow.define("pay", concurrency=Limit(key="c", max=below))
    assert str(err.value) == f"workflow 'pay': concurrency max must be at least 1, got {below}"
    with pytest.raises(InvalidArgument) as err:
        Workflow.define("pay").step(_step, name="charge", rate_limit=RateLimit(key="c", max=below)).build()
    assert str(err.value) == f"step 'charge': rate limit max must be at least 1, got {below}"


def test_a_workflow_limit_must_be_a_limit() -> None:
    with pytest.raises(InvalidArgument, match="concurrency must be a wiggle.Limit, got int"):
        Workflow.define("sync", concurrency=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["cancel_newest", "cancel_oldest", "nonsense"])
def test_a_step_limit_only_queues(strategy: str) -> None:
    wf = Workflow.define("pay").step(_step, name="charge", concurrency=Limit(key="c", strategy=strategy))
    with pytest.raises(InvalidArgument) as err:
        wf.build()
    assert str(err.value).startswith("step 'charge': a step's concurrency limit only queues")
    assert repr(strategy) in str(err.value)


def test_a_definition_sent_as_json_is_checked_the_same() -> None:
    good = Workflow.define("sync", concurrency=Limit(key="account_id")).step(_step, name="s").build()
    data = msgspec.json.decode(good.definition.to_json())
    data["concurrency"]["strategy"] = "latest"
    with pytest.raises(InvalidArgument, match="concurrency strategy 'latest'"):
        definition_from_json(msgspec.json.encode(data))
    data["concurrency"] = {"key": "account_id", "max": 0}
    with pytest.raises(InvalidArgument, match="concurrency max must be at least 1"):
        definition_from_json(msgspec.json.encode(data))


def test_the_canonical_form_carries_the_limit_and_omits_the_defaults() -> None:
    plain = Workflow.define("v").step(_step, name="s").build().definition
    assert b"concurrency" not in plain.to_json()  # earlier definitions keep their version
    queued = Workflow.define("v", concurrency=Limit(key="k")).step(_step, name="s").build().definition
    assert b'"concurrency":{"key":"k"}' in queued.to_json()
    newest = Workflow.define("v", concurrency=Limit(key="k", strategy="cancel_newest")).step(_step, name="s")
    assert b'"strategy":"cancel_newest"' in newest.build().definition.to_json()
    assert (
        len({plain.content_version(), queued.content_version(), newest.build().definition.content_version()})
        == 3
    )
    again = msgspec.json.decode(queued.to_json(), type=WorkflowDefinition)
    assert again.concurrency == Limit(key="k")


def _inst(n: int, *, retry: bool = False) -> Instance:
    return Instance(
        id=f"i{n}",
        workflow="w",
        version="v",
        status=InstanceStatus.SCHEDULED,
        context={},
        conc_key="k=1",
        conc_max=1,
        conc_since=n,
        conc_retry='{"from_node":""}' if retry else "",
    )


def test_decide_queue_begins_the_oldest_that_fit() -> None:
    limit = Limit(key="k", max=2)
    waiting = [(_inst(n), limit) for n in range(1, 5)]
    assert decide([], waiting).begin == ["i1", "i2"]
    assert decide([_inst(0)], waiting).begin == ["i1"]
    assert decide([_inst(0), _inst(9)], waiting) == decide([_inst(0), _inst(9)], [])


def test_decide_cancel_newest_cancels_what_does_not_fit_but_not_a_retry() -> None:
    limit = Limit(key="k", max=1, strategy="cancel_newest")
    out = decide([_inst(0)], [(_inst(1, retry=True), limit), (_inst(2), limit)])
    assert out.begin == []
    assert [iid for iid, _ in out.cancel] == ["i2"]  # the retry waits (queue rule)
    assert (
        out.cancel[0][1] == "cancelled: k=1 already has 1 live instance(s) (limit 1, strategy cancel_newest)"
    )


def test_decide_cancel_oldest_cancels_the_oldest_live_ones() -> None:
    limit = Limit(key="k", max=2, strategy="cancel_oldest")
    out = decide([_inst(0), _inst(1)], [(_inst(2), limit), (_inst(3), limit)])
    assert out.begin == ["i2", "i3"]
    assert [iid for iid, _ in out.cancel] == ["i0", "i1"]
    # more new ones than slots: the newest max win, an older new one is cancelled, never begun
    out = decide([], [(_inst(n), Limit(key="k", max=1, strategy="cancel_oldest")) for n in (1, 2, 3)])
    assert out.begin == ["i3"]
    assert [iid for iid, _ in out.cancel] == ["i1", "i2"]


def test_the_waiting_reason() -> None:
    assert waiting_reason(_inst(1)) == "waiting for a concurrency slot of k=1 (limit 1)"
    assert waiting_reason(_inst(1, retry=True)).startswith("a retry waiting for a concurrency slot")
    running = msgspec.structs.replace(_inst(1), status=InstanceStatus.RUNNING, conc_since=0)
    assert waiting_reason(running) == ""
