"""Mistakes in a workflow's definition are refused when it is defined, saying what is wrong and
what to do, not by a message about a symptom:

- a lambda step names no node ("step name '<lambda>' has characters outside [...]"): it needs
  ``name=``, and so does a callable without a name (a functools.partial, a callable object);
- a generator function as a handler (``async def`` or ``def`` with ``yield``) was accepted and
  failed every attempt at run time ("returned async_generator");
- a start that runs into a cycle nothing leaves was reported by its consequence ("node 'end' is
  unreachable from the start node 'a'"): the cycle is named.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from wiggle import InvalidArgument, NodeKind, Workflow, WorkflowDefinition
from wiggle._model import Node


def keep(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def scaled(ctx: dict[str, Any], factor: int) -> dict[str, Any]:
    return ctx


class CallableObject:
    def __call__(self, ctx: dict[str, Any]) -> dict[str, Any]:
        return ctx


async def agen(ctx: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield ctx


def gen(ctx: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield ctx


def combine_gen(base: dict[str, Any], branches: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield base


LAMBDA = "a lambda has no name to give its node: pass one with name="


@pytest.mark.parametrize(
    "add",
    [
        lambda w: w.step(lambda ctx: ctx),
        lambda w: w.gate(lambda ctx: True),
        lambda w: w.choose(lambda ctx: True, if_true=lambda b: b.step(keep)),
        lambda w: w.loop(lambda ctx: False, lambda b: b.step(keep)),
    ],
    ids=["step", "gate", "choose", "loop"],
)
def test_a_lambda_needs_a_name(add: Any) -> None:
    with pytest.raises(InvalidArgument) as err:
        add(Workflow.define("lambdas"))
    assert str(err.value).startswith(LAMBDA), err.value


def test_a_named_lambda_is_a_step() -> None:
    bp = Workflow.define("named-lambda").step(lambda ctx: ctx, name="tidy").build()
    assert "tidy" in bp.handlers


@pytest.mark.parametrize(
    "fn", [functools.partial(scaled, factor=2), CallableObject()], ids=["partial", "object"]
)
def test_a_callable_without_a_name_needs_one(fn: Any) -> None:
    with pytest.raises(InvalidArgument, match="has no __name__ to name its node: pass one with name="):
        Workflow.define("nameless").step(fn)
    assert "scale" in Workflow.define("nameless").step(fn, name="scale").build().handlers


@pytest.mark.parametrize(
    "fn, kind", [(agen, "an async generator function"), (gen, "a generator function")], ids=["async", "sync"]
)
def test_a_generator_function_is_refused_as_a_handler_naming_it(fn: Any, kind: str) -> None:
    for add in (
        lambda w: w.step(fn),
        lambda w: w.gate(fn),
        lambda w: w.choose(fn, if_true=lambda b: b.step(keep)),
    ):
        with pytest.raises(InvalidArgument) as err:
            add(Workflow.define("generators"))
        assert str(err.value) == (
            f"step {fn.__name__!r}: its handler {fn.__qualname__} is {kind} (it has `yield`), so a call "
            "gives a generator, not a result; a handler returns its result (`return ctx`, or None)"
        )


def test_a_generator_function_is_refused_as_a_join_combine() -> None:
    fork = Workflow.define("generator-combine").fork(
        lambda b: b.step(keep), lambda b: b.step(keep, name="k2")
    )
    with pytest.raises(
        InvalidArgument, match="^join 'join': its handler combine_gen is a generator function"
    ):
        fork.join(combine_gen)


T, P, END = NodeKind.TASK, NodeKind.PREDICATE, NodeKind.END


def _invalid(*nodes: Node, start: str = "a") -> str:
    with pytest.raises(InvalidArgument) as err:
        WorkflowDefinition(name="cycles", start_node=start, nodes=nodes).validate()
    return str(err.value)


def test_a_cycle_with_no_way_out_is_named() -> None:
    message = _invalid(
        Node(id="a", kind=T, next="b"), Node(id="b", kind=T, next="a"), Node(id="end", kind=END)
    )
    assert message == (
        "workflow 'cycles' can never end: 'a' -> 'b' -> 'a', a cycle with no way out (no path from it "
        "reaches an END node); give the loop an exit, e.g. a PREDICATE whose other edge leads out of it"
    )


def test_a_start_leading_into_a_cycle_with_no_way_out_names_both() -> None:
    message = _invalid(
        Node(id="a", kind=T, next="b"),
        Node(id="b", kind=P, next="c", alt_next="d"),
        Node(id="c", kind=T, next="b"),
        Node(id="d", kind=T, next="b"),
        Node(id="end", kind=END),
    )
    assert message.startswith(
        "workflow 'cycles' can never end: the start node 'a' leads into 'b' -> 'c' -> 'b', a cycle with no way out"
    ), message


def test_the_other_graph_refusals_are_unchanged() -> None:
    # a node nothing leads to, in a graph that can end
    orphan = _invalid(
        Node(id="a", kind=T, next="end"), Node(id="x", kind=T, next="end"), Node(id="end", kind=END)
    )
    assert orphan == "node 'x' is unreachable from the start node 'a'"
    # a cycle with no END at all
    assert _invalid(Node(id="a", kind=T, next="b"), Node(id="b", kind=T, next="a")) == (
        "workflow 'cycles' has no END node"
    )
    # a loop the start can leave by another way
    spin = _invalid(
        Node(id="a", kind=P, next="spin", alt_next="end"),
        Node(id="spin", kind=T, next="spin"),
        Node(id="end", kind=END),
    )
    assert spin == "node 'spin' cannot reach an END node (an endless loop?)"


def send_email(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def send_sms(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda w: w.step(send_email, name="notify").step(send_sms, name="notify"),
            "step name 'notify' is already used by another node of workflow 'dup'",
        ),
        (lambda w: w.step(keep).step(send_sms, name="keep"), "step name 'keep' is already used"),
        (lambda w: w.sleep("wait", 5).sleep("wait", 10), "sleep name 'wait' is already used"),
        (lambda w: w.step(keep, name="hold").sleep("hold", 5), "sleep name 'hold' is already used"),
        (
            lambda w: w.step(keep, name="go").wait_signal("approved", name="go"),
            "signal node name 'go' is already used",
        ),
        (
            lambda w: w.step(keep, name="f").fork(lambda b: b.step(send_sms), name="f"),
            "fork name 'f' is already used",
        ),
        (
            lambda w: w.step(keep, name="each").for_each("items", lambda b: b.step(send_sms), name="each"),
            "for_each name 'each' is already used",
        ),
    ],
)
def test_a_name_given_twice_is_refused_not_renamed(build: Any, message: str) -> None:
    """A second ``name="notify"`` was renamed ``notify.2`` behind the caller's back, so
    ``mock_step(flow, "notify", fake)`` mocked the first only and the real SMS went out in a test."""
    with pytest.raises(InvalidArgument) as refused:
        build(Workflow.define("dup", dict)).build()
    assert message in str(refused.value)
    assert "a name left to its default is numbered instead" in str(refused.value)


def test_names_left_to_their_default_are_still_numbered() -> None:
    flow = (
        Workflow.define("defaults", dict)
        .step(keep)
        .step(keep)
        .sleep("pause", 1)
        .wait_signal("go")
        .wait_signal("go")
        .build()
    )
    assert [n.id for n in flow.definition.nodes][:5] == ["keep", "keep.2", "pause", "go", "go.2"]
