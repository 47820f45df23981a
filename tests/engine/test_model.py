"""The graph model: version hash, canonical JSON, validation messages, retry policies."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import msgspec
import pytest

from wiggle import ExecutionMode, InvalidArgument, RetryPolicy, Workflow
from wiggle._model import (
    DEFAULT_RETRY,
    MAX_COUNT,
    MAX_DURATION_MILLIS,
    MAX_NAME_LENGTH,
    Node,
    NodeKind,
    WorkflowDefinition,
    definition_from_json,
    validate_name,
)

T, P, END = NodeKind.TASK, NodeKind.PREDICATE, NodeKind.END


# ---------------------------------------------------------------------------- helpers


def a(ctx):
    return ctx


def b(ctx):
    return ctx


def c(ctx):
    return ctx


def ok(ctx):
    return True


def build(name: str = "orders", mode: ExecutionMode | None = None, checkpoint: bool = False, **step_kw):
    wf = Workflow.define(name)
    if mode is not None:
        wf = wf.execution(mode)
    wf = wf.step(a, **step_kw)
    if checkpoint:
        wf = wf.checkpoint()
    return wf.gate(ok).step(b).build()


def linear(*nodes: Node, start: str = "a", **kw) -> WorkflowDefinition:
    return WorkflowDefinition(name=kw.pop("name", "w"), start_node=start, nodes=tuple(nodes), **kw)


def invalid(definition: WorkflowDefinition) -> str:
    with pytest.raises(InvalidArgument) as err:
        definition.validate()
    return str(err.value)


# ---------------------------------------------------------------------------- version hash


def test_same_graph_same_version() -> None:
    first, second = build(), build()
    assert first.version == second.version
    assert first.definition.to_json() == second.definition.to_json()
    assert re.fullmatch(r"[0-9a-f]{16}", first.version)


def test_handler_identity_is_not_part_of_the_version() -> None:
    def a(ctx):  # noqa: F811 - a different function with the same step name
        return {"other": True}

    other = Workflow.define("orders").step(a).gate(ok).step(b).build()
    assert other.version == build().version


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda: build(name="orders2"), id="name"),
        pytest.param(lambda: build(mode=ExecutionMode.LOCAL_SYNC), id="mode-sync"),
        pytest.param(lambda: build(mode=ExecutionMode.LOCAL_ASYNC), id="mode-async"),
        pytest.param(lambda: build(mode=ExecutionMode.SERVER), id="mode-server-explicit"),
        pytest.param(lambda: build(checkpoint=True), id="checkpoint"),
        pytest.param(lambda: build(queue="payments"), id="queue"),
        pytest.param(lambda: build(retry=RetryPolicy.fixed(5, 1)), id="retry"),
        pytest.param(lambda: build(name="orders", retry=RetryPolicy.fixed(3, 1)), id="retry-value"),
        pytest.param(
            lambda: Workflow.define("orders").step(a).gate(ok).step(b).step(c).build(), id="extra-step"
        ),
        pytest.param(lambda: Workflow.define("orders").step(a).step(b).build(), id="fewer-steps"),
        pytest.param(lambda: Workflow.define("orders").step(b).gate(ok).step(a).build(), id="order"),
        pytest.param(
            lambda: Workflow.define("orders").retry(RetryPolicy.none()).step(a).gate(ok).step(b).build(),
            id="default-retry",
        ),
        pytest.param(
            lambda: (
                Workflow.define("orders")
                .execution(ExecutionMode.LOCAL_ASYNC, max_steps=5)
                .step(a)
                .gate(ok)
                .step(b)
                .build()
            ),
            id="max-steps",
        ),
    ],
)
def test_any_change_mints_a_new_version(changed) -> None:
    assert changed().version != build().version


def test_modes_all_have_distinct_versions() -> None:
    versions = {build(mode=m).version for m in ExecutionMode}
    assert len(versions) == len(ExecutionMode)


def test_checkpoint_order_does_not_change_the_version() -> None:
    nodes = (
        Node(id="a", kind=T, next="b"),
        Node(id="b", kind=T, next="end"),
        Node(id="end", kind=END),
    )
    one = linear(*nodes, checkpoints=("a", "b"))
    two = linear(*nodes, checkpoints=("b", "a", "b"))
    assert one.to_json() == two.to_json()
    assert one.content_version() == two.content_version()
    assert linear(*nodes).content_version() != one.content_version()


# ---------------------------------------------------------------------------- canonical JSON


def test_canonical_json_is_sorted_and_omits_defaults() -> None:
    bp = build(mode=ExecutionMode.LOCAL_SYNC, checkpoint=True)
    raw = bp.definition.to_json()
    doc = msgspec.json.decode(raw)
    assert list(doc) == sorted(doc)
    for node in doc["nodes"]:
        assert list(node) == sorted(node)
        assert "sleep_millis" not in node and "branches" not in node  # defaults omitted
    assert doc["execution_mode"] == "LOCAL_SYNC"
    assert doc["checkpoints"] == ["a"]
    assert b" " not in raw  # compact


@pytest.mark.parametrize("mode", list(ExecutionMode))
def test_json_round_trip(mode: ExecutionMode) -> None:
    wf = (
        Workflow.define("round-trip")
        .execution(mode, max_steps=7)
        .retry(RetryPolicy.exponential(4, 0.5, 3.0, 10.0, 0.2))
        .step(a, queue="q1", retry=RetryPolicy.fixed(2, 0.1))
        .checkpoint()
        .choose(ok, if_true=lambda x: x.step(b), if_false=lambda x: x.end("nope", success=False))
        .sleep("nap", 1.5)
        .fork(lambda x: x.step(c), lambda x: x.step(lambda ctx: ctx, name="d"))
        .join(lambda base, br: base, queue="q2")
        .user_task("approval", timeout=60, on_timeout=lambda x: x.step(lambda ctx: ctx, name="late"))
    )
    definition = wf.build().definition
    again = definition_from_json(definition.to_json())
    assert again == definition
    assert again.to_json() == definition.to_json()
    assert again.content_version() == definition.content_version()


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"{not json", "not a valid workflow definition"),
        (b"[]", "not a valid workflow definition"),
        (b'{"name": "w", "start_node": "a", "nodes": [], "surprise": 1}', "surprise"),
        (
            b'{"name": "w", "start_node": "a", "nodes": [{"id": "a", "kind": "LOOP"}]}',
            "not a valid workflow definition",
        ),
        (
            b'{"name": "w", "start_node": "a", "nodes": [{"id": "a", "kind": "END"}], "execution_mode": "FAST"}',
            "not a valid",
        ),
        (b'{"name": "w", "start_node": "zz", "nodes": [{"id": "a", "kind": "END"}]}', "'zz'"),
    ],
)
def test_definition_from_json_rejects(data: bytes, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        definition_from_json(data)
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------- validation


def test_valid_definition_validates() -> None:
    d = linear(Node(id="a", kind=T, next="end"), Node(id="end", kind=END))
    assert d.validate() is d


def test_dangling_edge_names_the_node() -> None:
    msg = invalid(linear(Node(id="a", kind=T, next="nowhere"), Node(id="end", kind=END)))
    assert msg == "node 'a': 'next' points to 'nowhere', which does not exist"


def test_predicate_needs_both_edges() -> None:
    msg = invalid(linear(Node(id="a", kind=P, next="end"), Node(id="end", kind=END)))
    assert "'a'" in msg and "alt_next" in msg


def test_unreachable_node_is_named() -> None:
    msg = invalid(
        linear(
            Node(id="a", kind=T, next="end"), Node(id="orphan", kind=T, next="end"), Node(id="end", kind=END)
        )
    )
    assert msg == "node 'orphan' is unreachable from the start node 'a'"


def test_node_that_cannot_reach_an_end_is_named() -> None:
    msg = invalid(
        linear(
            Node(id="a", kind=P, next="spin", alt_next="end"),
            Node(id="spin", kind=T, next="spin"),
            Node(id="end", kind=END),
        )
    )
    assert msg == "node 'spin' cannot reach an END node (an endless loop?)"


def test_no_end_at_all() -> None:
    msg = invalid(linear(Node(id="a", kind=T, next="a")))
    assert "no END" in msg


def test_fork_without_join_is_named() -> None:
    msg = invalid(
        linear(
            Node(id="f", kind=NodeKind.FORK, branches=("x",)),
            Node(id="x", kind=T, next="end"),
            Node(id="end", kind=END),
            start="f",
        )
    )
    assert msg == "fork 'f' has no join"


def test_fork_whose_branch_bypasses_the_join() -> None:
    msg = invalid(
        linear(
            Node(id="f", kind=NodeKind.FORK, branches=("x", "y"), join="j"),
            Node(id="x", kind=T, next="j"),
            Node(id="y", kind=T, next="end"),
            Node(id="j", kind=NodeKind.JOIN, fork="f", next="end"),
            Node(id="end", kind=END),
            start="f",
        )
    )
    assert msg == "fork 'f': branch 'y' never reaches join 'j'"


def test_join_of_another_fork() -> None:
    msg = invalid(
        linear(
            Node(id="f", kind=NodeKind.FORK, branches=("x",), join="j"),
            Node(id="x", kind=T, next="j"),
            Node(id="j", kind=NodeKind.JOIN, fork="x", next="end"),
            Node(id="end", kind=END),
            start="f",
        )
    )
    assert "'f'" in msg and "'j'" in msg


def test_duplicate_ids_are_named() -> None:
    msg = invalid(
        linear(Node(id="a", kind=T, next="end"), Node(id="a", kind=T, next="end"), Node(id="end", kind=END))
    )
    assert msg == "workflow 'w': duplicate node id 'a'"


def test_end_with_an_edge() -> None:
    msg = invalid(linear(Node(id="a", kind=T, next="end"), Node(id="end", kind=END, next="a")))
    assert msg == "end 'end' must not have outgoing edges"


def test_checkpoint_must_be_a_worker_step() -> None:
    msg = invalid(linear(Node(id="a", kind=T, next="end"), Node(id="end", kind=END), checkpoints=("end",)))
    assert "checkpoint 'end'" in msg


@pytest.mark.parametrize(
    "policy, fragment",
    [
        (RetryPolicy(max_attempts=-1), "max_attempts must be >= 0"),
        (RetryPolicy(initial_backoff_millis=-5), "backoffs must be >= 0"),
        (RetryPolicy(max_backoff_millis=-1), "backoffs must be >= 0"),
        (RetryPolicy(multiplier=0.5), "multiplier must be >= 1.0"),
        (RetryPolicy(jitter=1.0), "jitter must be in [0, 1)"),
        (RetryPolicy(jitter=-0.1), "jitter must be in [0, 1)"),
    ],
)
def test_bad_retry_values_name_the_node(policy: RetryPolicy, fragment: str) -> None:
    msg = invalid(linear(Node(id="a", kind=T, next="end", retry=policy), Node(id="end", kind=END)))
    assert msg.startswith("node 'a': ")
    assert fragment in msg
    msg = invalid(linear(Node(id="a", kind=T, next="end"), Node(id="end", kind=END), default_retry=policy))
    assert msg.startswith("workflow 'w': ")
    assert fragment in msg
    with pytest.raises(InvalidArgument, match=re.escape(fragment)):
        Workflow.define("w").step(a, retry=policy).build()


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("", "must not be empty"),
        (" padded", "surrounding whitespace"),
        ("padded ", "surrounding whitespace"),
        ("has space", "characters outside"),
        ("-leading", "characters outside"),
        ("emoji-\u2603", "characters outside"),
        ("x" * (MAX_NAME_LENGTH + 1), f"the limit is {MAX_NAME_LENGTH}"),
        (42, "must be a string"),
    ],
)
def test_invalid_names(value, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        validate_name(value, "workflow name")
    assert fragment in str(err.value)
    assert str(err.value).startswith("workflow name")
    if isinstance(value, str):
        with pytest.raises(InvalidArgument):
            Workflow.define(value)
        if value:  # name="" means "use the function's name"
            with pytest.raises(InvalidArgument):
                Workflow.define("w").step(a, name=value)
        with pytest.raises(InvalidArgument):
            Workflow.define("w").step(a, queue=value)
        with pytest.raises(InvalidArgument):
            Workflow.define("w").user_task(value)


@pytest.mark.parametrize(
    "value", ["a", "orders.v2", "team/queue@eu-1", "x:y", "_private", "x" * MAX_NAME_LENGTH]
)
def test_valid_names(value: str) -> None:
    assert validate_name(value, "name") == value


def test_invalid_node_id_in_a_definition() -> None:
    msg = invalid(linear(Node(id="a b", kind=T, next="end"), Node(id="end", kind=END), start="a b"))
    assert "node id" in msg and "'a b'" in msg


def test_dsl_misuse_is_reported() -> None:
    with pytest.raises(InvalidArgument, match="join"):
        Workflow.define("w").step(a).join()
    with pytest.raises(InvalidArgument, match="checkpoint"):
        Workflow.define("w").checkpoint()
    with pytest.raises(InvalidArgument, match="follow .end"):
        Workflow.define("w").end().step(a)
    with pytest.raises(InvalidArgument, match="already used"):
        Workflow.define("w").step(a, name="approval").user_task("approval")
    with pytest.raises(InvalidArgument, match="context type"):
        Workflow.define("w", list)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="execution mode"):
        Workflow.define("w").execution("TURBO")


@pytest.mark.parametrize("success", [True, False])
def test_workflow_may_end_with_an_explicit_end(success: bool) -> None:
    bp = Workflow.define("w").step(a).end("all done", success=success).build()
    ends = [n for n in bp.definition.nodes if n.kind is END]
    assert [(n.reason, n.success) for n in ends] == [("all done", success)]
    assert bp.definition.node_map()["a"].next == ends[0].id


def test_repeated_handler_names_get_unique_ids() -> None:
    bp = Workflow.define("w").step(a).step(a).step(a).build()
    ids = [n.id for n in bp.definition.nodes if n.kind is T]
    assert sorted(ids) == ["a", "a.2", "a.3"]


# ---------------------------------------------------------------------------- retry policies


def test_presets() -> None:
    none = RetryPolicy.none()
    assert none.max_attempts == 1 and not none.allows_another(1) and none.backoff_millis(1) == 0
    fixed = RetryPolicy.fixed(4, 0.25)
    assert fixed.max_attempts == 4
    assert [fixed.backoff_millis(n) for n in (1, 2, 3)] == [250, 250, 250]
    assert fixed.allows_another(3) and not fixed.allows_another(4)
    forever = RetryPolicy.forever(0.5, 10)
    assert forever.max_attempts == 0 and forever.allows_another(10**9)
    assert forever.backoff_millis(1) == 500 and forever.backoff_millis(50) == 10_000
    exp = RetryPolicy.exponential(5, 0.1, 3.0, 2.0, 0.1)
    assert (
        exp.max_attempts,
        exp.initial_backoff_millis,
        exp.multiplier,
        exp.max_backoff_millis,
        exp.jitter,
    ) == (
        5,
        100,
        3.0,
        2000,
        0.1,
    )


def test_workflow_default_is_finite_3_attempts_1s_then_2s() -> None:
    assert DEFAULT_RETRY.max_attempts == 3
    assert [DEFAULT_RETRY.backoff_millis(n) for n in (1, 2)] == [1000, 2000]
    assert not DEFAULT_RETRY.allows_another(3)


def test_retry_for_precedence() -> None:
    node_policy, wf_policy = RetryPolicy.fixed(9, 1), RetryPolicy.fixed(7, 1)
    plain = Workflow.define("w").step(a).step(b, retry=node_policy).build().definition
    nodes = plain.node_map()
    assert plain.retry_for(nodes["a"]) == DEFAULT_RETRY
    assert plain.retry_for(nodes["b"]) == node_policy
    with_default = Workflow.define("w").retry(wf_policy).step(a).step(b, retry=node_policy).build().definition
    nodes = with_default.node_map()
    assert with_default.retry_for(nodes["a"]) == wf_policy
    assert with_default.retry_for(nodes["b"]) == node_policy


def test_backoff_formula_exponential_and_capped() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff_millis=100, multiplier=2.0, max_backoff_millis=1000)
    # before attempt n+1, after n failures: initial * multiplier^(n-1), capped
    assert [policy.backoff_millis(n) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    assert policy.backoff_millis(10_000) == 1000  # no overflow
    assert RetryPolicy(initial_backoff_millis=0, multiplier=5.0).backoff_millis(3) == 0
    tripled = RetryPolicy(initial_backoff_millis=10, multiplier=3.0, max_backoff_millis=10**9)
    assert [tripled.backoff_millis(n) for n in (1, 2, 3, 4)] == [10, 30, 90, 270]


def test_jitter_stays_in_range_and_varies() -> None:
    policy = RetryPolicy(initial_backoff_millis=1000, multiplier=2.0, max_backoff_millis=60_000, jitter=0.25)
    rng = random.Random(1234)
    for failures, base in ((1, 1000), (2, 2000), (3, 4000)):
        samples = [policy.backoff_millis(failures, rng) for _ in range(500)]
        assert min(samples) >= int(base * 0.75)
        assert max(samples) <= int(base * 1.25)
        assert len(set(samples)) > 50  # actually random
        # both halves of the range are used
        assert min(samples) < base * 0.85 and max(samples) > base * 1.15


def test_jitter_applies_after_the_cap() -> None:
    policy = RetryPolicy(initial_backoff_millis=1000, multiplier=10.0, max_backoff_millis=2000, jitter=0.5)

    class Extremes(random.Random):
        def __init__(self, pick: str) -> None:
            super().__init__()
            self.pick = pick

        def uniform(self, lo: float, hi: float) -> float:
            return lo if self.pick == "lo" else hi

    assert policy.backoff_millis(5, Extremes("lo")) == 1000
    assert policy.backoff_millis(5, Extremes("hi")) == 3000


# ---------------------------------------------------------------------------- bounds (issue #14)

BIG = 2**63 - 1  # what used to be accepted, then overflowed the store


def sleeping(**node: object) -> bytes:
    """A definition's JSON, as a client registers it, with one SLEEP node's fields set."""
    return msgspec.json.encode(
        {
            "name": "w",
            "start_node": "nap",
            "nodes": [{"id": "nap", "kind": "SLEEP", "next": "end", **node}, {"id": "end", "kind": "END"}],
        }
    )


def test_ten_years_is_the_longest_duration() -> None:
    assert MAX_DURATION_MILLIS == 10 * 36525 * 24 * 3600 * 10  # 365.25-day years, in ms
    assert MAX_COUNT == 2**31 - 1


@pytest.mark.parametrize(
    "data, fragment",
    [
        (
            sleeping(sleep_millis=BIG),
            f"sleep 'nap': sleep_millis is {BIG}; the limit is {MAX_DURATION_MILLIS}",
        ),
        (sleeping(sleep_millis=MAX_DURATION_MILLIS + 1), "sleep_millis is 315576000001; the limit is"),
        (sleeping(sleep_millis=-1), "sleep 'nap': sleep_millis must be >= 0"),
    ],
)
def test_register_refuses_an_out_of_range_sleep(data: bytes, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        definition_from_json(data)
    assert fragment in str(err.value)


def test_register_accepts_the_longest_sleep() -> None:
    assert definition_from_json(sleeping(sleep_millis=MAX_DURATION_MILLIS)).nodes[0].sleep_millis == (
        MAX_DURATION_MILLIS
    )


def user_task(timeout_millis: int) -> WorkflowDefinition:
    return linear(
        Node(id="ask", kind=NodeKind.USER_TASK, next="end", timeout_millis=timeout_millis),
        Node(id="end", kind=END),
        start="ask",
    )


def test_user_task_timeout_is_bounded() -> None:
    assert user_task(MAX_DURATION_MILLIS).validate()
    msg = invalid(user_task(BIG))
    assert (
        msg
        == f"user task 'ask': timeout_millis is {BIG}; the limit is {MAX_DURATION_MILLIS} milliseconds (10 years)"
    )
    assert "timeout_millis must be >= 0" in invalid(user_task(-1))


def test_max_local_steps_is_bounded() -> None:
    nodes = (Node(id="a", kind=T, next="end"), Node(id="end", kind=END))
    assert linear(*nodes, max_local_steps=MAX_COUNT).validate()
    msg = invalid(linear(*nodes, max_local_steps=MAX_COUNT + 1))
    assert msg == f"workflow 'w': max_local_steps is {MAX_COUNT + 1}; the limit is {MAX_COUNT}"
    assert "max_local_steps must be >= 0" in invalid(linear(*nodes, max_local_steps=-1))
    with pytest.raises(InvalidArgument, match="max_steps is 2147483648; the limit is 2147483647"):
        Workflow.define("w").execution(ExecutionMode.LOCAL_ASYNC, max_steps=MAX_COUNT + 1)


@pytest.mark.parametrize(
    "policy, fragment",
    [
        (
            RetryPolicy(max_attempts=MAX_COUNT + 1),
            f"retry max_attempts is {MAX_COUNT + 1}; the limit is {MAX_COUNT}",
        ),
        (RetryPolicy(max_attempts=BIG), f"retry max_attempts is {BIG}; the limit is {MAX_COUNT}"),
        (
            RetryPolicy(initial_backoff_millis=BIG),
            f"retry initial_backoff_millis is {BIG}; the limit is {MAX_DURATION_MILLIS}",
        ),
        (
            RetryPolicy(max_backoff_millis=MAX_DURATION_MILLIS + 1),
            f"retry max_backoff_millis is {MAX_DURATION_MILLIS + 1}; the limit is {MAX_DURATION_MILLIS}",
        ),
        (RetryPolicy(multiplier=1e308), "retry multiplier is 1e+308; the limit is 1000.0"),
        (RetryPolicy(multiplier=float("inf")), "retry multiplier is inf; the limit is 1000.0"),
        (RetryPolicy(multiplier=float("nan")), "retry multiplier must be a number, got nan"),
        (RetryPolicy(max_attempts="3"), "retry max_attempts must be an integer, got str"),  # type: ignore[arg-type]
        (RetryPolicy(initial_backoff_millis=1.5), "retry initial_backoff_millis must be an integer"),  # type: ignore[arg-type]
    ],
)
def test_retry_counts_and_durations_are_bounded(policy: RetryPolicy, fragment: str) -> None:
    msg = invalid(linear(Node(id="a", kind=T, next="end", retry=policy), Node(id="end", kind=END)))
    assert msg.startswith("node 'a': ")
    assert fragment in msg
    with pytest.raises(InvalidArgument, match=re.escape(fragment)):
        Workflow.define("w").step(a, retry=policy).build()


def test_retry_limits_themselves_are_accepted() -> None:
    policy = RetryPolicy(
        max_attempts=MAX_COUNT,
        initial_backoff_millis=MAX_DURATION_MILLIS,
        max_backoff_millis=MAX_DURATION_MILLIS,
        multiplier=1000.0,
    )
    assert linear(Node(id="a", kind=T, next="end", retry=policy), Node(id="end", kind=END)).validate()


def test_register_refuses_a_retry_out_of_range_from_json() -> None:
    data = msgspec.json.encode(
        {
            "name": "w",
            "start_node": "a",
            "nodes": [
                {"id": "a", "kind": "TASK", "next": "end", "retry": {"max_backoff_millis": BIG}},
                {"id": "end", "kind": "END"},
            ],
        }
    )
    with pytest.raises(InvalidArgument, match=f"node 'a': retry max_backoff_millis is {BIG}; the limit is"):
        definition_from_json(data)


@pytest.mark.parametrize(
    "duration, fragment",
    [
        (
            10 * 366 * 24 * 3600,
            "sleep duration is 316224000 seconds; the limit is 315576000 seconds (10 years)",
        ),
        (timedelta(days=3653), "sleep duration is 315619200.0 seconds; the limit is 315576000 seconds"),
        (float("inf"), "sleep duration must be a finite number of seconds, got inf"),
        (float("nan"), "sleep duration must be a finite number of seconds, got nan"),
        (-1, "sleep duration must not be negative"),
        ("5", "sleep duration must be a timedelta or seconds, got str"),
    ],
)
def test_dsl_durations_are_bounded_and_raise_invalid_argument(duration: object, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        Workflow.define("w").sleep("nap", duration)  # type: ignore[arg-type]
    assert fragment in str(err.value)
    timeout_fragment = fragment.replace("sleep duration", "timeout")
    with pytest.raises(InvalidArgument, match=re.escape(timeout_fragment)):
        Workflow.define("w").user_task("ask", timeout=duration)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryPolicy.fixed(3, float("inf")),
        lambda: RetryPolicy.fixed(3, "1"),
        lambda: RetryPolicy.exponential(3, 1.0, max_seconds=1e12),
        lambda: RetryPolicy.forever(initial_seconds=float("nan")),
        lambda: Workflow.define("w").execution("SOMETIMES"),
        lambda: Workflow.define("w").execution(5),
        lambda: Workflow.define("w").execution(ExecutionMode.SERVER, max_steps="9"),
        lambda: Workflow.define("w").step(a).end(reason=5),
    ],
)
def test_dsl_misuse_is_always_invalid_argument(make) -> None:
    # (RetryPolicy's swapped delays: test_a_first_delay_over_the_cap_is_refused below)
    # one family: never a bare TypeError, ValueError or OverflowError from the model or the DSL
    with pytest.raises(InvalidArgument):
        make()


def test_a_handler_that_cannot_take_the_context_is_refused_when_the_step_is_added() -> None:
    """A handler that cannot be called with one argument would fail every attempt with a TypeError
    on the worker (its retries too): the builder says so at once, naming the step."""
    from wiggle import InvalidArgument, Workflow

    def two(ctx, other):  # noqa: ARG001
        return ctx

    def none():
        return {}

    with pytest.raises(
        InvalidArgument, match=r"step 'two': its handler .*two\(ctx, other\) cannot be called with one"
    ):
        Workflow.define("two-args").step(two)
    with pytest.raises(InvalidArgument, match="step 'none': its handler"):
        Workflow.define("no-args").gate(none)
    with pytest.raises(InvalidArgument, match="step 'pick'"):
        Workflow.define("choose").choose(lambda a, b: True, name="pick")

    def keywords(ctx, *, extra=1):  # noqa: ARG001
        return ctx

    async def coroutine(ctx, extra=None):  # noqa: ARG001
        return ctx

    # one positional argument, whatever else has a default; builtins whose signature is unknown
    Workflow.define("fine").step(keywords).step(coroutine).step(lambda *args: args[0], name="star").build()


@pytest.mark.parametrize("attempts", [0, -1])
def test_retry_helpers_refuse_attempts_below_one_naming_none_and_forever(attempts: int) -> None:
    """``max_attempts == 0`` means no limit: ``fixed(0, 1.0)`` read as "no retry" retried a step
    4,638 times in a minute (an outside trial)."""
    for make in (lambda: RetryPolicy.fixed(attempts, 1.0), lambda: RetryPolicy.exponential(attempts, 1.0)):
        with pytest.raises(InvalidArgument, match=r"must be 1 or more .*none\(\).*forever\(\)"):
            make()
    assert RetryPolicy.fixed(1, 0).max_attempts == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: RetryPolicy.exponential(3, 10, max_seconds=1),
            "RetryPolicy.exponential: the first delay (10 s) is longer than max_seconds (1 s), so every "
            "delay would be 1 s",
        ),
        (lambda: RetryPolicy.forever(10, 1), "RetryPolicy.forever: the first delay (10 s) is longer"),
    ],
)
def test_a_first_delay_over_the_cap_is_refused(make: object, message: str) -> None:
    """``exponential(3, 10, max_seconds=1)`` (the two swapped) was taken, every delay 1 s."""
    with pytest.raises(InvalidArgument) as refused:
        make()
    assert message in str(refused.value)
    assert RetryPolicy.exponential(3, 1, max_seconds=1).max_backoff_millis == 1000  # equal: fine


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"jitter": 2}, "RetryPolicy.exponential: retry jitter must be in [0, 1), got 2"),
        ({"jitter": -0.1}, "RetryPolicy.exponential: retry jitter must be in [0, 1), got -0.1"),
        ({"multiplier": 0.5}, "RetryPolicy.exponential: retry multiplier must be >= 1.0, got 0.5"),
        ({"multiplier": 0}, "RetryPolicy.exponential: retry multiplier must be >= 1.0, got 0"),
        ({"multiplier": 1e6}, "RetryPolicy.exponential: retry multiplier is 1000000.0; the limit is 1000.0"),
        ({"multiplier": "2"}, "RetryPolicy.exponential: retry multiplier must be a number, got '2'"),
    ],
)
def test_exponential_refuses_a_bad_multiplier_or_jitter_at_once(
    options: dict[str, object], message: str
) -> None:
    """``exponential(3, 1, jitter=2)`` was taken, refused only by build() (an outside trial)."""
    with pytest.raises(InvalidArgument) as refused:
        RetryPolicy.exponential(3, 1, **options)  # type: ignore[arg-type]
    assert str(refused.value) == message
    # a policy made without the helper is still refused by build(), naming the step
    with pytest.raises(InvalidArgument, match=r"node 'a': retry (jitter|multiplier)"):
        Workflow.define("w").step(a, retry=RetryPolicy(**options)).build()  # type: ignore[arg-type]


def test_an_execution_mode_is_taken_in_any_case() -> None:
    """``.execution("local_sync")`` was refused, though ``wiggle demo --mode`` takes any case."""
    assert (
        Workflow.define("w").execution("local_sync").step(a).build().definition.execution_mode == "LOCAL_SYNC"
    )
