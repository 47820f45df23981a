"""The sub_workflow DSL refuses bad arguments with InvalidArgument, like step does."""

from __future__ import annotations

import pytest

from wiggle import InvalidArgument, RetryPolicy, Workflow


def a(ctx):
    return ctx


def test_input_keys_as_a_string_is_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        Workflow.define("p").sub_workflow("call", "child", input_keys="amount")  # type: ignore[arg-type]
    assert str(err.value) == "input_keys must be a list of key names, not a string"


def test_input_keys_as_a_list_or_tuple_is_kept_whole() -> None:
    for keys in (["amount"], ("amount", "currency")):
        bp = Workflow.define("p").sub_workflow("call", "child", input_keys=keys).build()
        (node,) = [n for n in bp.definition.nodes if n.id == "call"]
        assert node.input_keys == tuple(keys)


def test_input_keys_that_are_not_key_names_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="input_keys must be a list of key names"):
        Workflow.define("p").sub_workflow("call", "child", input_keys=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="input_keys must name context keys"):
        Workflow.define("p").sub_workflow("call", "child", input_keys=["ok", 3])  # type: ignore[list-item]


def test_retry_that_is_not_a_retry_policy_is_refused_like_step() -> None:
    with pytest.raises(InvalidArgument) as step_err:
        Workflow.define("p").step(a, retry=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as sub_err:
        Workflow.define("p").sub_workflow("call", "child", retry=3)  # type: ignore[arg-type]
    assert str(sub_err.value) == str(step_err.value) == "retry must be a RetryPolicy, got int"


def test_a_retry_policy_is_accepted() -> None:
    policy = RetryPolicy.fixed(2, 0)
    bp = Workflow.define("p").sub_workflow("call", "child", retry=policy).build()
    (node,) = [n for n in bp.definition.nodes if n.id == "call"]
    assert node.retry == policy
