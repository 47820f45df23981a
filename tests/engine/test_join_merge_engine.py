"""The engine support of the upstream Wiggle protocol, in the pure engine (no store).

LAST_WRITE_WINS joins (docs/semantics.md#last-write-wins-joins), diff completions
(docs/semantics.md#diff-completions) and client-chosen lease lengths (docs/semantics.md#leases).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from wiggle import Workflow
from wiggle._engine import lww
from wiggle._engine.engine import MIN_LEASE_MILLIS, Engine, EngineConfig, LoadedDefinition
from wiggle._engine.state import Changes, InstanceState, InstanceStatus, JoinState, Token, TokenStatus
from wiggle._model import JoinMerge, Node, NodeKind, WorkflowDefinition, definition_from_json
from wiggle._storage.postgres.codecs import decode_joins, encode
from wiggle.errors import FailedPrecondition, InvalidArgument

LWW = JoinMerge.LAST_WRITE_WINS


def _step(ctx):  # pragma: no cover - never run: the tests play the worker
    return ctx


def _fork(merge: JoinMerge = LWW, combine: bool = False) -> WorkflowDefinition:
    return WorkflowDefinition(
        name="fork",
        start_node="fork",
        nodes=(
            Node(id="fork", kind=NodeKind.FORK, branches=("a", "b"), join="join"),
            Node(id="a", kind=NodeKind.TASK, next="join"),
            Node(id="b", kind=NodeKind.TASK, next="join"),
            Node(id="join", kind=NodeKind.JOIN, fork="fork", next="end", combine=combine),
            Node(id="end", kind=NodeKind.END),
        ),
        join_merge=merge,
    )


def _for_each(merge: JoinMerge = LWW, concurrency: int = 0) -> WorkflowDefinition:
    return WorkflowDefinition(
        name="fe",
        start_node="fe",
        nodes=(
            Node(
                id="fe",
                kind=NodeKind.FOR_EACH,
                items_key="items",
                item_key="item",
                index_key="itemIndex",
                branches=("body",),
                join="j",
                concurrency=concurrency,
            ),
            Node(id="body", kind=NodeKind.TASK, next="j"),
            Node(id="j", kind=NodeKind.JOIN, fork="fe", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
        join_merge=merge,
    )


def _ready(state: InstanceState) -> list[Token]:
    return sorted(
        (t for t in state.tokens.values() if t.status == TokenStatus.READY), key=lambda t: t.created_at
    )


def _run(engine: Engine, loaded: LoadedDefinition, state: InstanceState, tok: Token, **writes: Any) -> None:
    engine.claim(loaded, state, tok, "w", 2, Changes())
    engine.complete(loaded, state, tok.id, "w", 3, context={**engine.context_of(state, tok), **writes})


# ---------------------------------------------------------------------------- the definition


def test_strict_stays_out_of_the_canonical_json_and_the_version() -> None:
    strict = _fork(JoinMerge.STRICT)
    assert b"join_merge" not in strict.to_json()
    dsl = Workflow.define("dsl").fork(lambda b: b.step(_step), lambda b: b.step(_step)).build().definition
    assert dsl.join_merge is JoinMerge.STRICT and b"join_merge" not in dsl.to_json()
    lww_json = _fork().to_json()
    assert b'"join_merge":"LAST_WRITE_WINS"' in lww_json
    assert _fork().content_version() != strict.content_version()
    assert definition_from_json(lww_json).join_merge is LWW


def test_a_combine_join_is_refused_in_a_last_write_wins_definition() -> None:
    _fork(JoinMerge.STRICT, combine=True).validate()  # fine when strict
    with pytest.raises(
        InvalidArgument, match="join 'join' has a combine step, but workflow 'fork' joins LAST_WRITE_WINS"
    ):
        _fork(combine=True).validate()


# ---------------------------------------------------------------------------- the fold


def test_fold_arrivals_applies_each_branch_s_diff_in_order() -> None:
    base = {"x": 0, "y": 0, "z": 0}
    first = {"x": 1, "y": 0}  # sets x, removes z
    second = {"x": 2, "y": 0, "z": 0, "w": 5}  # sets x and w; z as at the fork: no write
    assert lww.fold_arrivals(base, [first, second]) == {"x": 2, "y": 0, "w": 5}
    assert lww.fold_arrivals(base, [second, first]) == {"x": 1, "y": 0, "w": 5}
    assert lww.fold_arrivals(base, []) == base


def test_merge_writes_replaces_earlier_writes_and_removals() -> None:
    join = JoinState(fork_node="fe", branch_count=3, base={})
    lww.merge_writes(join, {"a": 1, "b": 1}, ["c"])
    lww.merge_writes(join, {"c": 2}, ["a"])
    lww.merge_writes(join, {"a": 3}, [])
    assert join.merged == {"b": 1, "c": 2, "a": 3} and join.merged_removed == [] and join.merged_count == 3
    assert lww.apply_merged({"a": 0, "c": 0, "d": 0}, join) == {"a": 3, "b": 1, "c": 2, "d": 0}


def test_the_arrival_order_survives_the_postgres_encoding() -> None:
    join = JoinState(fork_node="f", branch_count=3, base={}, arrived={"2": {}, "0": {}, "1": {}})
    join.joined_tokens = ["t.3", "t.1", "t.2"]
    back = decode_joins(encode({"g": join}))["g"]
    assert list(back.arrived) == ["2", "0", "1"] and back.joined_tokens == ["t.3", "t.1", "t.2"]


def test_a_join_state_stored_before_the_merge_fields_still_decodes() -> None:
    old = b'{"g":{"fork_node":"fe","branch_count":2,"base":{},"for_each":true,"started":2,"results":{"0":1}}}'
    join = decode_joins(old)["g"]
    assert join.merged == {} and join.merged_removed == [] and join.merged_count == 0


def test_fork_branches_fold_in_arrival_order() -> None:
    loaded = LoadedDefinition(_fork())
    engine = Engine()
    state, _ = engine.start(loaded, "wi-f", {"x": 0}, "", 1)
    a, b = _ready(state)
    _run(engine, loaded, state, b, x="b")
    _run(engine, loaded, state, a, x="a")
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {"x": "a"}


def test_for_each_merges_writes_without_results_item_or_index() -> None:
    loaded = LoadedDefinition(_for_each(concurrency=3))
    engine = Engine()
    state, _ = engine.start(loaded, "wi-fe", {"items": [1, 2, 3], "k": 0}, "", 1)
    for tok in reversed(_ready(state)):  # element 2 first, element 0 last
        item = engine.context_of(state, tok)["item"]
        _run(engine, loaded, state, tok, k=item, **{f"saw{item}": True}, result="ignored")
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {
        "items": [1, 2, 3],
        "k": 1,
        "saw1": True,
        "saw2": True,
        "saw3": True,
        "result": "ignored",
    }


def test_for_each_writes_beyond_the_payload_limit_fail_the_instance() -> None:
    loaded = LoadedDefinition(_for_each(concurrency=4))
    engine = Engine(EngineConfig(max_payload_bytes=2_000))
    state, _ = engine.start(loaded, "wi-fat", {"items": list(range(100))}, "", 1)
    done = 0
    while state.instance.status == InstanceStatus.RUNNING:
        for tok in _ready(state):
            _run(engine, loaded, state, tok, **{f"k{engine.context_of(state, tok)['itemIndex']}": "x" * 100})
            done += 1
            if state.instance.status != InstanceStatus.RUNNING:
                break
    assert state.instance.status == InstanceStatus.FAILED
    assert done < 25
    assert state.instance.error.startswith("for_each 'fe': the branches' writes reached ")
    assert "of 100 elements; the limit is 2000 bytes" in state.instance.error


def test_for_each_overwrites_stay_within_the_limit() -> None:
    # every branch writes the same key: the sum of the writes passes the limit, the merge does not
    loaded = LoadedDefinition(_for_each(concurrency=2))
    engine = Engine(EngineConfig(max_payload_bytes=2_000))
    state, _ = engine.start(loaded, "wi-same", {"items": list(range(60))}, "", 1)
    while state.instance.status == InstanceStatus.RUNNING:
        for tok in _ready(state):
            _run(engine, loaded, state, tok, same="x" * 100 + str(engine.context_of(state, tok)["item"]))
    assert state.instance.status == InstanceStatus.COMPLETED, state.instance.error
    assert state.instance.context["same"] == "x" * 100 + "59"


def test_for_each_context_beyond_the_limit_after_the_merge_fails_the_instance() -> None:
    loaded = LoadedDefinition(_for_each(concurrency=2))
    engine = Engine(EngineConfig(max_payload_bytes=2_000))
    state, _ = engine.start(loaded, "wi-after", {"items": [0, 1], "pad": "p" * 1_200}, "", 1)
    for tok in _ready(state):
        _run(engine, loaded, state, tok, **{f"k{engine.context_of(state, tok)['item']}": "x" * 500})
    assert state.instance.status == InstanceStatus.FAILED
    assert state.instance.error.startswith(
        "for_each 'fe': the context after merging the branches' writes is "
    )
    assert state.instance.error.endswith("; the limit is 2000 bytes")


def test_a_retried_for_each_keeps_its_merged_writes() -> None:
    loaded = LoadedDefinition(_for_each(concurrency=2))
    engine = Engine()
    state, _ = engine.start(loaded, "wi-retry", {"items": ["a", "b"]}, "", 1)
    first, second = _ready(state)
    _run(engine, loaded, state, first, a=True)
    engine.claim(loaded, state, second, "w", 4, Changes())
    engine.fail(loaded, state, second.id, "w", "boom", False, 5)
    assert state.instance.status == InstanceStatus.FAILED
    engine.retry(loaded, state, "", None, "ops", 6)
    (again,) = _ready(state)
    _run(engine, loaded, state, again, b=True)
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {"items": ["a", "b"], "a": True, "b": True}


def test_a_retried_strict_for_each_keeps_its_results() -> None:
    # resume.py used to rebuild the join without its FOR_EACH fields: the retried branch then
    # arrived at a plain join and waited there for ever
    loaded = LoadedDefinition(_for_each(JoinMerge.STRICT, concurrency=2))
    engine = Engine()
    state, _ = engine.start(loaded, "wi-retry", {"items": ["a", "b"]}, "", 1)
    first, second = _ready(state)
    _run(engine, loaded, state, first, result="A")
    engine.claim(loaded, state, second, "w", 4, Changes())
    engine.fail(loaded, state, second.id, "w", "boom", False, 5)
    engine.retry(loaded, state, "", None, "ops", 6)
    (again,) = _ready(state)
    _run(engine, loaded, state, again, result="B")
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {"items": ["a", "b"], "results": ["A", "B"]}


# ---------------------------------------------------------------------------- diff completions


def test_a_diff_is_applied_to_the_token_s_context() -> None:
    bp = Workflow.define("d").step(_step).build()
    loaded = LoadedDefinition(bp.definition)
    engine = Engine()
    state, _ = engine.start(loaded, "wi-d", {"a": 1, "b": 2}, "", 1)
    (tok,) = _ready(state)
    engine.claim(loaded, state, tok, "w", 2, Changes())
    engine.complete(loaded, state, tok.id, "w", 3, diff=({"c": 3, "a": None}, ["b", "missing"]))
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {"a": None, "c": 3}


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        (({"a": 1}, ["b"], []), "diff must be a pair"),
        (([], []), "diff must set a JSON object's keys, got list"),
        (({1: 2}, []), "diff must set a JSON object's keys"),
        (({}, "b"), "diff must remove a list of keys"),
    ],
)
def test_a_malformed_diff_is_refused_and_changes_nothing(diff: Any, message: str) -> None:
    bp = Workflow.define("d").step(_step).build()
    loaded = LoadedDefinition(bp.definition)
    engine = Engine()
    state, _ = engine.start(loaded, "wi-d", {"a": 1}, "", 1)
    (tok,) = _ready(state)
    engine.claim(loaded, state, tok, "w", 2, Changes())
    before = msgspec.to_builtins((state.instance, state.tokens))
    with pytest.raises(InvalidArgument, match=message):
        engine.complete(loaded, state, tok.id, "w", 3, diff=diff)
    with pytest.raises(InvalidArgument, match="a context or a diff, not both"):
        engine.complete(loaded, state, tok.id, "w", 3, context={"a": 2}, diff=({}, []))
    assert msgspec.to_builtins((state.instance, state.tokens)) == before


def test_a_combine_step_reports_its_whole_context() -> None:
    loaded = LoadedDefinition(_fork(JoinMerge.STRICT, combine=True))
    engine = Engine()
    state, _ = engine.start(loaded, "wi-c", {"x": 0}, "", 1)
    a, b = _ready(state)
    _run(engine, loaded, state, a, x=1)
    _run(engine, loaded, state, b, x=2)
    (combine,) = _ready(state)
    engine.claim(loaded, state, combine, "w", 4, Changes())
    with pytest.raises(InvalidArgument, match="node 'join' is a combine step: report its whole context"):
        engine.complete(loaded, state, combine.id, "w", 5, diff=({"x": 3}, []))
    engine.complete(loaded, state, combine.id, "w", 5, context={"x": 3})
    assert state.instance.context == {"x": 3}


def test_a_diff_for_a_token_not_leased_is_refused_like_a_context() -> None:
    bp = Workflow.define("d").step(_step).build()
    loaded = LoadedDefinition(bp.definition)
    engine = Engine()
    state, _ = engine.start(loaded, "wi-d", {}, "", 1)
    (tok,) = _ready(state)
    with pytest.raises(FailedPrecondition, match="is READY, not RUNNING"):
        engine.complete(loaded, state, tok.id, "w", 3, diff=({"a": 1}, []))


# ---------------------------------------------------------------------------- lease lengths


def test_lease_lengths_are_clamped() -> None:
    engine = Engine(EngineConfig(lease_millis=30_000, max_lease_millis=60_000))
    assert engine.lease_length(None) == 30_000
    assert engine.lease_length(0) == engine.lease_length(-5) == MIN_LEASE_MILLIS == 1_000
    assert engine.lease_length(45_000) == 45_000
    assert engine.lease_length(10**15) == 60_000
    for bad in (True, 1.5, "100"):
        with pytest.raises(InvalidArgument, match="lease_millis must be an integer"):
            engine.lease_length(bad)  # type: ignore[arg-type]


def test_claim_and_heartbeat_take_the_length_asked() -> None:
    bp = Workflow.define("l").step(_step).build()
    loaded = LoadedDefinition(bp.definition)
    engine = Engine(EngineConfig(lease_millis=30_000, max_lease_millis=60_000))
    state, _ = engine.start(loaded, "wi-l", {}, "", 1)
    (tok,) = _ready(state)
    engine.claim(loaded, state, tok, "w", 100, Changes(), lease_millis=50)
    assert tok.lease_expires_at == 1_100
    expires, _ = engine.heartbeat(loaded, state, tok.id, "w", 200, extend_millis=10**9)
    assert expires == tok.lease_expires_at == 60_200
    expires, _ = engine.heartbeat(loaded, state, tok.id, "w", 300)
    assert expires == 30_300
    with pytest.raises(InvalidArgument, match="extend_millis must be an integer"):
        engine.heartbeat(loaded, state, tok.id, "w", 400, extend_millis=2.5)  # type: ignore[arg-type]
    assert tok.lease_expires_at == 30_300


@pytest.mark.parametrize("merge", [JoinMerge.STRICT, LWW])
def test_a_for_each_failed_at_its_size_limit_says_why_in_its_history(merge: JoinMerge) -> None:
    """Found by an outside trial: the instance's error named the limit, but its history ended on
    COMPLETED steps, with nothing saying where or why it failed."""
    loaded = LoadedDefinition(_for_each(merge, concurrency=4))
    engine = Engine(EngineConfig(max_payload_bytes=2_000))
    state, _ = engine.start(loaded, "wi-limit", {"items": list(range(100))}, "", 1)
    last = Changes()
    while state.instance.status == InstanceStatus.RUNNING:
        for tok in _ready(state):
            index = engine.context_of(state, tok)["itemIndex"]
            engine.claim(loaded, state, tok, "w", 2, Changes())
            context = {**engine.context_of(state, tok), "result": "x" * 100, f"k{index}": "x" * 100}
            last = engine.complete(loaded, state, tok.id, "w", 3, context=context)
            if state.instance.status != InstanceStatus.RUNNING:
                break
    assert state.instance.status == InstanceStatus.FAILED
    failed = [e for e in last.history if e.outcome == "FAILED"]
    assert [(e.node_id, e.kind, e.error) for e in failed] == [("fe", "FOR_EACH", state.instance.error)]
    assert "the limit is 2000 bytes" in failed[0].error


# ---------------------------------------------------------------------------- compact joins (join_diffs)


def _finish(engine: Engine, loaded: LoadedDefinition, state: InstanceState, tok: Token, ctx: dict) -> None:
    engine.claim(loaded, state, tok, "w", 2, Changes())
    engine.complete(loaded, state, tok.id, "w", 3, context=ctx)


COMPACT = EngineConfig(join_diffs=True)


@pytest.mark.parametrize("merge", [JoinMerge.STRICT, LWW])
def test_with_join_diffs_a_join_keeps_what_each_branch_changed(merge: JoinMerge) -> None:
    """Found by an outside trial: the join kept every arrived branch's whole context, written again
    with each arrival (a fork of 200 branches over a 100 KB context: ~30 s, 7.8 GB of server memory
    on PostgreSQL). With join_diffs it keeps each branch's changes; the fold is the same."""
    loaded = LoadedDefinition(_fork(merge))
    engine = Engine(COMPACT)
    pad = "p" * 10_000
    state, _ = engine.start(loaded, "wi-d", {"pad": pad, "gone": 1, "x": 0}, "", 1)
    a, b = _ready(state)
    _finish(engine, loaded, state, a, {"pad": pad, "x": 0, "a": True})  # sets a, removes gone
    (join,) = state.instance.joins.values()
    assert join.diffs and join.arrived == {"0": {"a": True}} and join.removed == {"0": ["gone"]}
    back = decode_joins(encode(state.instance.joins))  # as PostgreSQL keeps it
    assert list(back.values())[0].removed == {"0": ["gone"]}
    _finish(engine, loaded, state, b, {"pad": pad, "gone": 1, "x": 0, "b": [1, 2]})
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {"pad": pad, "x": 0, "a": True, "b": [1, 2]}


def test_without_join_diffs_a_join_keeps_whole_contexts_as_an_earlier_release_reads_them() -> None:
    loaded = LoadedDefinition(_fork(JoinMerge.STRICT))
    engine = Engine()
    state, _ = engine.start(loaded, "wi-w", {"x": 0, "gone": 1}, "", 1)
    a, _ = _ready(state)
    _finish(engine, loaded, state, a, {"x": 0, "a": True})
    (join,) = state.instance.joins.values()
    assert not join.diffs and join.arrived == {"0": {"x": 0, "a": True}}
    assert b'"diffs":true' not in encode(state.instance.joins)


def test_a_server_without_join_diffs_folds_a_join_another_made_with_them() -> None:
    """During the switch some servers have join_diffs and some not: each folds either kind."""
    loaded = LoadedDefinition(_fork(JoinMerge.STRICT))
    state, _ = Engine(COMPACT).start(loaded, "wi-mix", {"x": 0, "gone": 1}, "", 1)
    a, b = _ready(state)
    _finish(Engine(COMPACT), loaded, state, a, {"x": 0, "a": 1})  # a diff: removes gone
    _finish(Engine(), loaded, state, b, {"x": 0, "gone": 1, "b": 2})
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context == {"x": 0, "a": 1, "b": 2}


def test_with_join_diffs_a_combine_step_gets_each_branch_s_whole_context() -> None:
    loaded = LoadedDefinition(_fork(JoinMerge.STRICT, combine=True))
    engine = Engine(COMPACT)
    state, _ = engine.start(loaded, "wi-cc", {"x": 0, "keep": "k", "gone": 1}, "", 1)
    a, b = _ready(state)
    _finish(engine, loaded, state, a, {"x": 1, "keep": "k"})
    _finish(engine, loaded, state, b, {"x": 2, "keep": "k", "gone": 1})
    (combine,) = _ready(state)
    assert combine.context == {
        "base": {"x": 0, "keep": "k", "gone": 1},
        "branches": [{"x": 1, "keep": "k"}, {"x": 2, "keep": "k", "gone": 1}],
    }
