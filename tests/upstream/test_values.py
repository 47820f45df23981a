"""google.protobuf.Value / Struct to and from Python (wiggle/_upstream/values.py)."""

from __future__ import annotations

import enum
import math
import re
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from wiggle._upstream.values import (
    context_from_value,
    dict_to_struct,
    diff_from_value,
    from_value,
    readable,
    struct_to_dict,
    to_value,
)
from wiggle.errors import InvalidArgument


def number(n: float) -> struct_pb2.Value:
    return struct_pb2.Value(number_value=n)


def parsed(obj: Any) -> struct_pb2.Value:
    """What protobuf's own JSON reader makes of ``obj``: the reference to agree with."""
    return json_format.ParseDict(obj, struct_pb2.Value())


# ---------------------------------------------------------------------------- reading


def test_each_kind_reads_back() -> None:
    v = parsed({"s": "x", "n": 1.5, "i": 3, "b": True, "z": None, "l": [1, "a", [], {}], "o": {"k": False}})
    assert from_value(v) == {
        "s": "x",
        "n": 1.5,
        "i": 3,
        "b": True,
        "z": None,
        "l": [1, "a", [], {}],
        "o": {"k": False},
    }
    assert from_value(struct_pb2.Value()) is None  # nothing set reads as null


@pytest.mark.parametrize(
    ("double", "expected"),
    [
        (3.0, 3),
        (-0.0, 0),
        (2.0**53, 2**53),
        (-(2.0**53), -(2**53)),
        (2.0**53 + 2, 2.0**53 + 2),
        (1e300, 1e300),
        (0.1, 0.1),
        (-2.5, -2.5),
    ],
)
def test_numbers(double: float, expected: float) -> None:
    got = from_value(number(double))
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_with_their_path(bad: float) -> None:
    v = struct_pb2.Value()
    v.struct_value.fields["a"].list_value.values.add().string_value = "ok"
    v.struct_value.fields["a"].list_value.values.add().number_value = bad
    with pytest.raises(
        InvalidArgument, match=re.escape(f"{bad} is not a JSON number at the context['a'][1]")
    ):
        from_value(v, "the context")
    with pytest.raises(InvalidArgument, match=re.escape(f"{bad} is not a JSON number in the value")):
        from_value(number(bad))


def test_struct_to_dict() -> None:
    s = json_format.ParseDict({"a": {"b": [1, 2.5]}, "c": None}, struct_pb2.Struct())
    assert struct_to_dict(s) == {"a": {"b": [1, 2.5]}, "c": None}
    s.fields["d"].number_value = math.nan
    with pytest.raises(InvalidArgument, match=re.escape("nan is not a JSON number at the object['d']")):
        struct_to_dict(s)


# ---------------------------------------------------------------------------- writing


def test_each_kind_writes() -> None:
    obj = {"s": "x", "n": 1.5, "i": 3, "b": True, "z": None, "l": [1, "a", [], {}], "o": {"k": False}}
    assert to_value(obj) == parsed(obj)
    assert to_value({}).WhichOneof("kind") == "struct_value"  # an empty object is still an object
    assert to_value([]).WhichOneof("kind") == "list_value"
    assert to_value(None).WhichOneof("kind") == "null_value"
    assert to_value(True).WhichOneof("kind") == "bool_value"  # a bool is not a number
    assert to_value((1, 2)) == parsed([1, 2])


def test_subclasses_of_json_types_write_as_their_base() -> None:
    class Color(enum.IntEnum):
        RED = 1

    class Name(str, enum.Enum):
        A = "a"

    assert from_value(to_value({"c": Color.RED, "n": Name.A})) == {"c": 1, "n": "a"}


def test_integers_a_double_holds_exactly_are_sent() -> None:
    for n in (2**53, -(2**53), 2**60, -(2**70), 10**20):
        assert from_value(to_value(n)) == n


@pytest.mark.parametrize("n", [2**53 + 1, -(2**53) - 1, 10**17 + 1, 10**400])
def test_integers_a_double_would_round_are_refused(n: int) -> None:
    with pytest.raises(InvalidArgument, match=r"has no exact JSON number .* at the context\['k'\]\[0\]"):
        to_value({"k": [n]}, "the context")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_not_sent(bad: float) -> None:
    with pytest.raises(
        InvalidArgument, match=re.escape(f"{bad} is not a JSON number at the value['a']['b']")
    ):
        to_value({"a": {"b": bad}})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({1: "x"}, "the key 1 is not a string in the value"),
        ({"a": {1, 2}}, "a set is not a JSON value at the value['a']"),
    ],
)
def test_what_json_cannot_hold_is_refused(bad: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        to_value(bad)


def test_dict_to_struct() -> None:
    assert dict_to_struct({"a": [1, None]}) == json_format.ParseDict({"a": [1, None]}, struct_pb2.Struct())
    with pytest.raises(InvalidArgument, match="the definition must be a JSON object, got list"):
        dict_to_struct([], "the definition")  # type: ignore[arg-type]


def test_deep_nesting_is_refused_not_a_crash() -> None:
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InvalidArgument, match="the value is nested too deeply"):
        to_value(deep)


# ---------------------------------------------------------------------------- contexts and diffs


def test_context_from_value() -> None:
    assert context_from_value(struct_pb2.Value()) == {}
    assert context_from_value(parsed(None)) == {}
    assert context_from_value(parsed({"a": 1})) == {"a": 1}
    assert context_from_value(parsed({})) == {}


@pytest.mark.parametrize(
    ("value", "name"), [([1], "a list"), (1, "a number"), ("x", "a string"), (True, "a boolean")]
)
def test_a_context_must_be_an_object(value: Any, name: str) -> None:
    with pytest.raises(InvalidArgument, match=f"^context must be a JSON object, got {name}$"):
        context_from_value(parsed(value))


def test_diff_from_value() -> None:
    assert diff_from_value(None) == ({}, [])
    assert diff_from_value(struct_pb2.Value()) == ({}, [])
    assert diff_from_value(parsed(None)) == ({}, [])
    assert diff_from_value(parsed({})) == ({}, [])
    changed, removed = diff_from_value(parsed({"a": 1, "gone": None, "b": {"c": None}, "also": None}))
    assert changed == {"a": 1, "b": {"c": None}}  # only top-level nulls remove
    assert sorted(removed) == ["also", "gone"]


def test_a_diff_must_be_an_object() -> None:
    with pytest.raises(InvalidArgument, match="a step's result must be a JSON object .* or null, got a list"):
        diff_from_value(parsed([1]))
    v = parsed({"a": 1})
    v.struct_value.fields["b"].number_value = math.inf
    with pytest.raises(
        InvalidArgument, match=re.escape("inf is not a JSON number at the step's result['b']")
    ):
        diff_from_value(v)


# ---------------------------------------------------------------------------- properties

KEYS = st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)


def same_json(a: Any, b: Any) -> bool:
    """Equal, with bools kept apart from numbers (True == 1 in Python)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_json, a, b))
    return bool(a == b)


@settings(max_examples=300)
@given(JSON)
def test_round_trip(obj: Any) -> None:
    value = to_value(obj)
    assert same_json(from_value(value), obj)
    assert value == parsed(obj)  # the same message protobuf's own reader builds
    back = struct_pb2.Value.FromString(value.SerializeToString())
    assert same_json(from_value(back), obj)


@given(JSON)
def test_whole_numbers_within_2_53_read_as_int(obj: Any) -> None:
    def ints_only(x: Any) -> bool:
        if isinstance(x, float):
            return not (x.is_integer() and abs(x) <= 2**53)
        if isinstance(x, dict):
            return all(ints_only(v) for v in x.values())
        if isinstance(x, list):
            return all(map(ints_only, x))
        return True

    assert ints_only(from_value(to_value(obj)))


@given(st.dictionaries(KEYS, JSON, max_size=6))
def test_diff_property(diff: dict[str, Any]) -> None:
    changed, removed = diff_from_value(to_value(diff))
    assert set(removed) == {k for k, v in diff.items() if v is None}
    assert same_json(changed, {k: v for k, v in diff.items() if v is not None})
    assert same_json(struct_to_dict(dict_to_struct(diff)), diff)


def test_readable_shows_integers_no_double_holds_as_text() -> None:
    exact = {"a": [2**70, 2**53, -(2**53), 5, 1.5, True, None, "s"], "b": {"c": {}}}
    assert readable(exact) == exact
    assert readable({"a": [2**70 + 1], "b": {"c": -(2**60) - 1}, "d": 10**400}) == {
        "a": [str(2**70 + 1)],
        "b": {"c": str(-(2**60) - 1)},
        "d": str(10**400),
    }
    assert to_value(readable({"big": 2**70 + 1})).struct_value.fields["big"].string_value == str(2**70 + 1)
