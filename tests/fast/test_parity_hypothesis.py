"""Differential tests: Hypothesis feeds the same input to the compiled twin and to the pure one.

Values (with key order and types), exception types and messages, and encoded bytes must all
agree. Only compiled twins are compared with the reference (``impl`` below); under
WIGGLE_IMPL=python this module is not collected (tests/fast/conftest.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wiggle._engine.records import PredicateDone, StepFailed, StepRecord, TaskDone
from wiggle._model import Node, NodeKind, WorkflowDefinition

from .conftest import COMPILED, Impl, load


@pytest.fixture(scope="session", params=COMPILED)
def impl(request: pytest.FixtureRequest) -> Impl:
    """A compiled implementation, compared with ``reference`` (the pure twins)."""
    return load(request.param)


# The session-scoped ``impl`` fixture is reused across examples on purpose: it is immutable.
parity = settings(
    deadline=None, max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call did, comparable across twins: its result's repr, or its exception's type and text."""
    try:
        result = fn(*args)
    except Exception as exc:  # the point is to compare whatever was raised
        return ("raised", type(exc).__qualname__, str(exc), repr(exc.args))
    return ("returned", type(result).__qualname__, repr(result))


def same(impl_fn: Callable[..., Any], ref_fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    got = outcome(impl_fn, *args)
    expected = outcome(ref_fn, *args)
    assert got == expected
    return got


# values -----------------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
# Values that are == to each other across types (1, 1.0, True...): the diff must still see a change.
tricky = st.sampled_from([0, 1, 0.0, 1.0, -0.0, True, False, "", "1", None, [], {}, [1], {"a": 1}, math.nan])
values = tricky | json_values
keys = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]) | st.text(max_size=3)
contexts = st.dictionaries(keys, values, max_size=10)
small_contexts = st.dictionaries(keys, values, max_size=4)


@st.composite
def derived(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """A context derived from ``base`` the way a step makes one: keep, replace, drop and add keys."""
    out: dict[str, Any] = {}
    for key, value in base.items():
        action = draw(st.sampled_from(["keep", "keep", "copy", "replace", "drop"]))
        if action == "keep":
            out[key] = value
        elif action == "copy":
            out[key] = msgspec.json.decode(msgspec.json.encode(value)) if value == value else value
        elif action == "replace":
            out[key] = draw(values)
    for key, value in draw(contexts).items():
        if key not in base or draw(st.booleans()):
            out[key] = value
    if draw(st.booleans()):  # reorder: order is part of the result
        items = list(out.items())
        draw(st.randoms()).shuffle(items)
        out = dict(items)
    return out


@st.composite
def before_after(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    before = draw(contexts)
    return before, draw(derived(before))


@st.composite
def base_and_branches(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    base = draw(contexts)
    return base, draw(st.lists(derived(base), max_size=4))


# merge ------------------------------------------------------------------------------------------


@parity
@given(pair=before_after())
def test_diff_parity(impl: Impl, reference: Impl, pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    before, after = pair
    same(impl.merge.diff, reference.merge.diff, before, after)
    # Applying the diff rebuilds ``after`` (equal values of equal types; key order may differ,
    # because moving a key is not a change).
    rebuilt = impl.merge.apply_diff(before, *impl.merge.diff(before, after))
    assert rebuilt == after
    assert all(type(rebuilt[key]) is type(value) for key, value in after.items())


@parity
@given(context=contexts, changed=small_contexts, removed=st.lists(keys, max_size=5))
def test_apply_diff_parity(
    impl: Impl, reference: Impl, context: dict[str, Any], changed: dict[str, Any], removed: list[str]
) -> None:
    same(impl.merge.apply_diff, reference.merge.apply_diff, context, changed, removed)


@parity
@given(case=base_and_branches())
def test_fold_join_parity(
    impl: Impl, reference: Impl, case: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    base, branches = case
    result = same(impl.merge.fold_join, reference.merge.fold_join, base, branches)
    if result[0] == "raised":
        assert result[1] == "JoinConflict"


# traversal --------------------------------------------------------------------------------------

QUEUES = ["wf", "q1", "q2"]


@st.composite
def definitions(draw: st.DrawFn) -> WorkflowDefinition:
    """Graphs of any shape: every kind, cycles, checkpoints anywhere, now and then a dangling edge."""
    count = draw(st.integers(min_value=0, max_value=25))
    ids = [f"n{i}" for i in range(count)]
    if count and draw(st.integers(0, 9)) == 0:
        ids[draw(st.integers(0, count - 1))] = ids[0]  # a duplicate id
    edge = st.none() | st.sampled_from(ids) if ids else st.none()
    # Worker steps are drawn more often, so local runs (plan) grow long enough to meet checkpoints.
    kinds = st.sampled_from([NodeKind.TASK] * 6 + [NodeKind.PREDICATE] * 2 + list(NodeKind))
    nodes = [
        Node(
            id=node_id,
            kind=draw(kinds),
            next=draw(edge),
            alt_next=draw(edge),
            queue=draw(st.sampled_from([None, None, None, *QUEUES])),
        )
        for node_id in ids
    ]
    if nodes and draw(st.integers(0, 9)) == 0:  # now and then an edge to a node that does not exist
        at = draw(st.integers(0, count - 1))
        field = draw(st.sampled_from(["next", "alt_next"]))
        nodes[at] = msgspec.structs.replace(nodes[at], **{field: "ghost"})
    checkpoints = draw(st.lists(st.sampled_from([*ids, "zz"]), max_size=8))
    return WorkflowDefinition(
        name=draw(st.sampled_from(QUEUES)),
        start_node=ids[0] if ids else "none",
        nodes=tuple(nodes),
        checkpoints=tuple(checkpoints),
    )


queue_sets = (
    st.just(frozenset(QUEUES))
    | st.sets(st.sampled_from(QUEUES))
    | st.lists(st.sampled_from(QUEUES)).map(tuple)
)


@parity
@given(definition=definitions(), queues=queue_sets)
def test_traversal_parity(impl: Impl, reference: Impl, definition: WorkflowDefinition, queues: Any) -> None:
    built = same(
        lambda d: type(impl.traversal.CompiledGraph(d)).__name__,
        lambda d: type(reference.traversal.CompiledGraph(d)).__name__,
        definition,
    )
    if built[0] == "raised":
        return
    g = impl.traversal.CompiledGraph(definition)
    r = reference.traversal.CompiledGraph(definition)
    for attr in ("ids", "index", "kinds", "nexts", "alts", "queues", "checkpoints"):
        assert repr(getattr(g, attr)) == repr(getattr(r, attr)), attr
    for node_id in [*{n.id for n in definition.nodes}, "ghost"]:
        for value in (True, False):
            same(g.successor, r.successor, node_id, value)
        same(g.classify, r.classify, node_id, queues)
        same(g.is_checkpoint, r.is_checkpoint, node_id)


# batch ------------------------------------------------------------------------------------------

node_ids = st.text(min_size=1, max_size=12)
task_steps = st.tuples(
    st.just("T"),
    node_ids,
    st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    st.lists(st.text(max_size=6), max_size=3),
)
predicate_steps = st.tuples(st.just("P"), node_ids, st.booleans())
failure_steps = st.tuples(st.just("F"), node_ids, st.text(max_size=40), st.booleans())
batches = st.lists(task_steps | predicate_steps | failure_steps, max_size=20)
records = st.lists(
    task_steps.map(lambda t: TaskDone(*t[1:]))
    | predicate_steps.map(lambda t: PredicateDone(*t[1:]))
    | failure_steps.map(lambda t: StepFailed(*t[1:])),
    max_size=20,
)


@parity
@given(steps=records)
def test_batch_round_trip_parity(impl: Impl, reference: Impl, steps: list[StepRecord]) -> None:
    data = reference.batch.encode_batch(steps)
    assert impl.batch.encode_batch(steps) == data
    # the records' array form is the old tuple format, byte for byte
    assert data == msgspec.json.encode(
        [(s.__struct_config__.tag, *msgspec.structs.astuple(s)) for s in steps]
    )
    decoded = impl.batch.decode_batch(data)
    assert decoded == steps
    assert repr(decoded) == repr(reference.batch.decode_batch(data))
    assert impl.batch.encode_batch(decoded) == data


# Shapes near the valid ones, so most examples reach the per-element checks.
near_tags = st.sampled_from(["T", "P", "F", "X", "", "TT", "t"]) | json_scalars
near_elements = st.lists(near_tags | node_ids | json_values, max_size=5).flatmap(
    lambda rest: st.tuples(near_tags, node_ids | json_scalars).map(lambda head: [*head, *rest])
)


@st.composite
def damaged_steps(draw: st.DrawFn) -> list[Any]:
    """A valid step with one position replaced, or one element added or dropped."""
    step = list(draw(task_steps | predicate_steps | failure_steps))
    how = draw(st.sampled_from(["replace", "replace", "append", "pop", "removed"]))
    if how == "replace":
        step[draw(st.integers(0, len(step) - 1))] = draw(json_values | tricky)
    elif how == "append":
        step.append(draw(json_values))
    elif how == "pop":
        step.pop()
    elif step[0] == "T":
        step[3] = draw(st.lists(st.text(max_size=3) | json_scalars, min_size=1, max_size=3))
    return step


near_batches = st.lists(
    near_elements | damaged_steps() | task_steps.map(list) | predicate_steps.map(list) | json_values,
    max_size=6,
)


@parity
@given(raw=near_batches | json_values)
def test_decode_parity_on_arbitrary_json(impl: Impl, reference: Impl, raw: Any) -> None:
    data = msgspec.json.encode(raw)
    got = same(impl.batch.decode_batch, reference.batch.decode_batch, data)
    # whatever msgspec's typed decode refuses, the walk names in the worker's terms
    assert "is not a valid batch" not in str(got)


@parity
@given(steps=batches, cut=st.integers(min_value=0), junk=st.binary(max_size=3))
def test_decode_parity_on_damaged_bytes(
    impl: Impl, reference: Impl, steps: list[Any], cut: int, junk: bytes
) -> None:
    data = reference.batch.encode_batch(steps)
    at = cut % (len(data) + 1)
    for damaged in (data[:at], data[:at] + junk + data[at:], data[:at] + data[at + 1 :]):
        same(impl.batch.decode_batch, reference.batch.decode_batch, damaged)


@parity
@given(data=st.binary(max_size=64))
def test_decode_parity_on_random_bytes(impl: Impl, reference: Impl, data: bytes) -> None:
    same(impl.batch.decode_batch, reference.batch.decode_batch, data)


@parity
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["T", "P", "F"]), json_values, json_values, json_values), max_size=5
    )
)
def test_encode_parity_on_anything(impl: Impl, reference: Impl, steps: list[Any]) -> None:
    same(impl.batch.encode_batch, reference.batch.encode_batch, steps)
