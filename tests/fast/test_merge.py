"""Context merge (diff, apply_diff, fold_join), on each implementation."""

from __future__ import annotations

import inspect
from collections import OrderedDict
from types import MappingProxyType
from typing import Any

import pytest

from .conftest import Impl


def ordered(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """Items in order: key order is part of the result (it is what gets serialized)."""
    return list(d.items())


# diff -------------------------------------------------------------------------------------------


def test_diff_of_equal_contexts_is_empty(impl: Impl) -> None:
    ctx = {"a": 1, "b": [1, 2], "c": {"d": None}}
    assert impl.merge.diff(ctx, dict(ctx)) == ({}, [])
    assert impl.merge.diff(ctx, {"a": 1, "b": [1, 2], "c": {"d": None}}) == ({}, [])


def test_diff_reports_set_new_and_removed_keys_in_order(impl: Impl) -> None:
    before = {"a": 1, "b": 2, "c": 3, "d": 4}
    after = {"z": 0, "d": 4, "b": 20, "y": [1]}
    changed, removed = impl.merge.diff(before, after)
    assert ordered(changed) == [("z", 0), ("b", 20), ("y", [1])]
    assert removed == ["a", "c"]
    assert type(changed) is dict and type(removed) is list


def test_diff_treats_a_type_change_as_a_change(impl: Impl) -> None:
    # 1 == 1.0 == True in Python, but they serialize differently: a type change is a change.
    before = {"i": 1, "f": 1.0, "b": True, "n": 0}
    after = {"i": 1.0, "f": True, "b": 1, "n": False}
    changed, removed = impl.merge.diff(before, after)
    assert ordered(changed) == [("i", 1.0), ("f", True), ("b", 1), ("n", False)]
    assert [type(v) for v in changed.values()] == [float, bool, int, bool]
    assert removed == []


def test_diff_compares_nested_values_by_value(impl: Impl) -> None:
    before = {"l": [1, {"x": 2}], "d": {"k": [3]}}
    assert impl.merge.diff(before, {"l": [1, {"x": 2}], "d": {"k": [3]}}) == ({}, [])
    assert impl.merge.diff(before, {"l": [1, {"x": 3}], "d": {"k": [3]}}) == ({"l": [1, {"x": 3}]}, [])


def test_diff_nan_is_unchanged_only_when_it_is_the_same_object(impl: Impl) -> None:
    nan = float("nan")
    assert impl.merge.diff({"x": nan}, {"x": nan}) == ({}, [])
    changed, _ = impl.merge.diff({"x": nan}, {"x": float("nan")})
    assert list(changed) == ["x"]


def test_diff_from_and_to_empty(impl: Impl) -> None:
    assert impl.merge.diff({}, {"a": 1}) == ({"a": 1}, [])
    assert impl.merge.diff({"a": 1}, {}) == ({}, ["a"])
    assert impl.merge.diff({}, {}) == ({}, [])


def test_diff_accepts_other_mappings(impl: Impl) -> None:
    before = OrderedDict([("a", 1), ("b", 2)])
    after = MappingProxyType({"b": 3, "c": 4})
    assert impl.merge.diff(before, after) == ({"b": 3, "c": 4}, ["a"])


def test_diff_rejects_non_mappings_like_the_reference(impl: Impl, reference: Impl) -> None:
    for before, after in [({"a": 1}, [("a", 1)]), (None, {}), ({}, None), ([1], {"a": 1})]:
        with pytest.raises(Exception) as expected:
            reference.merge.diff(before, after)
        with pytest.raises(type(expected.value)) as got:
            impl.merge.diff(before, after)
        assert str(got.value) == str(expected.value)


def test_diff_does_not_mutate_its_inputs(impl: Impl) -> None:
    before = {"a": 1, "b": 2}
    after = {"b": 3}
    impl.merge.diff(before, after)
    assert before == {"a": 1, "b": 2} and after == {"b": 3}


# apply_diff -------------------------------------------------------------------------------------


def test_apply_diff_drops_then_sets_and_returns_a_new_dict(impl: Impl) -> None:
    ctx = {"a": 1, "b": 2, "c": 3}
    result = impl.merge.apply_diff(ctx, {"b": 20, "d": 4}, ["a", "missing"])
    assert ordered(result) == [("b", 20), ("c", 3), ("d", 4)]
    assert ctx == {"a": 1, "b": 2, "c": 3}
    assert result is not ctx and type(result) is dict


def test_apply_diff_of_a_diff_rebuilds_the_target(impl: Impl) -> None:
    before = {"a": 1, "b": [2], "c": {"x": 1}}
    after = {"b": [2, 3], "c": {"x": 1}, "d": None}
    assert impl.merge.apply_diff(before, *impl.merge.diff(before, after)) == after


def test_apply_diff_a_key_both_removed_and_set_ends_up_set(impl: Impl) -> None:
    assert ordered(impl.merge.apply_diff({"a": 1, "b": 2}, {"a": 9}, ["a"])) == [("b", 2), ("a", 9)]


def test_apply_diff_accepts_pairs_and_any_iterable_of_keys(impl: Impl) -> None:
    result = impl.merge.apply_diff(OrderedDict(a=1, b=2), [("c", 3)], (k for k in ["a"]))
    assert ordered(result) == [("b", 2), ("c", 3)]
    assert type(result) is dict


@pytest.mark.parametrize(
    ("context", "changed", "removed"),
    [
        ({}, {}, None),  # removed not iterable
        ({"a": 1}, {}, [["unhashable"]]),  # a removed key that cannot be a key
        ({}, 5, []),  # changed neither mapping nor pairs
        ({}, ["ab", "c"], []),  # a pair of the wrong length
        (None, {}, []),  # context not a mapping
    ],
)
def test_apply_diff_errors_match_the_reference(
    impl: Impl, reference: Impl, context: Any, changed: Any, removed: Any
) -> None:
    with pytest.raises(Exception) as expected:
        reference.merge.apply_diff(context, changed, removed)
    with pytest.raises(type(expected.value)) as got:
        impl.merge.apply_diff(context, changed, removed)
    assert str(got.value) == str(expected.value)


# fold_join --------------------------------------------------------------------------------------


def test_fold_join_merges_disjoint_branch_changes(impl: Impl) -> None:
    base = {"shared": 1, "a_removes": 2, "keep": 3}
    branches = [
        {"shared": 1, "keep": 3, "a": "A"},  # sets a, removes a_removes
        {"shared": 1, "a_removes": 2, "keep": 3, "b": "B"},  # sets b
        dict(base),  # no change
    ]
    result = impl.merge.fold_join(base, branches)
    assert ordered(result) == [("shared", 1), ("keep", 3), ("a", "A"), ("b", "B")]
    assert base == {"shared": 1, "a_removes": 2, "keep": 3}


def test_fold_join_without_branches_is_a_copy(impl: Impl) -> None:
    base = {"a": 1}
    result = impl.merge.fold_join(base, [])
    assert result == base and result is not base


def test_fold_join_same_value_set_by_two_branches_is_still_a_conflict(impl: Impl) -> None:
    with pytest.raises(impl.merge.JoinConflict) as info:
        impl.merge.fold_join({}, [{"x": 1}, {"x": 1}])
    assert (info.value.key, info.value.first, info.value.second) == ("x", 0, 1)


@pytest.mark.parametrize(
    ("base", "branches", "conflict"),
    [
        ({"k": 0}, [{"k": 1}, {"k": 2}], ("k", 0, 1)),  # set / set
        ({"k": 0}, [{}, {"k": 2}], ("k", 0, 1)),  # removed / set
        ({"k": 0}, [{"k": 1}, {}], ("k", 0, 1)),  # set / removed
        ({"k": 0}, [{}, {}], ("k", 0, 1)),  # removed / removed
        ({"k": 0, "j": 0}, [{"k": 0, "j": 0}, {"k": 0}, {"k": 5, "j": 0}, {"j": 1}], ("j", 1, 3)),
        ({}, [{"a": 1}, {"b": 1}, {"c": 1, "a": 2}], ("a", 0, 2)),
    ],
)
def test_fold_join_conflicts_name_key_and_branches(
    impl: Impl, base: dict[str, Any], branches: list[dict[str, Any]], conflict: tuple[str, int, int]
) -> None:
    with pytest.raises(impl.merge.JoinConflict) as info:
        impl.merge.fold_join(base, branches)
    err = info.value
    assert (err.key, err.first, err.second) == conflict
    assert err.args == conflict
    assert isinstance(err, Exception)


def test_fold_join_a_type_change_is_a_change(impl: Impl) -> None:
    with pytest.raises(impl.merge.JoinConflict):
        impl.merge.fold_join({"n": 1}, [{"n": 1.0}, {"n": True}])
    assert impl.merge.fold_join({"n": 1}, [{"n": 1}, {"n": 1.0}]) == {"n": 1.0}


def test_fold_join_reports_the_first_conflict_set_keys_before_removed_keys(impl: Impl) -> None:
    # Branch 1 both removes "r" and sets "s", each owned by branch 0: the set key is reported.
    with pytest.raises(impl.merge.JoinConflict) as info:
        impl.merge.fold_join({"r": 1, "s": 1}, [{"s": 2}, {"s": 3}])
    assert info.value.args == ("s", 0, 1)


def test_fold_join_accepts_mappings_and_iterables(impl: Impl) -> None:
    base = OrderedDict(a=1)
    branches = iter([MappingProxyType({"a": 1, "b": 2}), OrderedDict(a=1, c=3)])
    assert ordered(impl.merge.fold_join(base, branches)) == [("a", 1), ("b", 2), ("c", 3)]


def test_join_conflict_is_an_exception_with_its_fields(impl: Impl, reference: Impl) -> None:
    err: Any = impl.merge.JoinConflict("key", 0, 2)
    ref: Any = reference.merge.JoinConflict("key", 0, 2)
    assert (err.key, err.first, err.second) == ("key", 0, 2)
    assert isinstance(err, Exception)
    assert err.args == ref.args and str(err) == str(ref) and repr(err) == repr(ref)
    assert type(err).__name__ == "JoinConflict"
    assert inspect.getdoc(type(err)) == inspect.getdoc(type(ref))
