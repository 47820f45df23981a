"""wiggle/_wire/payload.py: the JSON fields of requests."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wiggle._wire.payload import MAX_JSON_DEPTH, check_depth, decode_object
from wiggle.errors import InvalidArgument


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_depth_at_the_limit_passes_one_more_fails() -> None:
    check_depth(nested(MAX_JSON_DEPTH), "x")
    with pytest.raises(
        InvalidArgument,
        match=f"x nests more than {MAX_JSON_DEPTH} levels deep; the nesting limit is {MAX_JSON_DEPTH} levels",
    ):
        check_depth(nested(MAX_JSON_DEPTH + 1), "x")


def test_brackets_inside_strings_do_not_nest() -> None:
    text = msgspec.json.encode({"s": "[" * 5000 + '\\"{' * 100, "t": ["]" * 10]})
    check_depth(text, "x")
    assert decode_object(text, "x", None)["s"].startswith("[[[")


def test_many_shallow_brackets_pass() -> None:
    wide = msgspec.json.encode({"rows": [[i, {"v": [i]}] for i in range(5000)]})
    check_depth(wide, "x")


def test_deep_objects_count_too() -> None:
    deep = b'{"a":' * 300 + b"1" + b"}" * 300
    with pytest.raises(InvalidArgument, match="nesting limit"):
        decode_object(deep, "context_json", None)


@given(
    st.recursive(st.integers() | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner))
)
def test_depth_check_agrees_with_the_real_depth(value: object) -> None:
    def depth(v: object) -> int:
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0

    data = msgspec.json.encode(value)
    if depth(value) <= MAX_JSON_DEPTH:
        check_depth(data, "x")
    else:  # pragma: no cover - hypothesis rarely nests this deep
        with pytest.raises(InvalidArgument):
            check_depth(data, "x")


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 10_000,  # never closed: the decoder recurses before it sees the end
        b'{"a": ' + b"[" * 10_000 + b"}",
        b'["\\\\", ' + b"[" * 5000 + b"]" * 5000 + b"]",  # an escaped backslash before the nesting
        b'["\\"]", ' + b"[" * 5000 + b"]" * 5000 + b"]",  # an escaped quote with a bracket
    ],
)
def test_unbalanced_or_escaped_deep_input_is_refused(data: bytes) -> None:
    with pytest.raises(InvalidArgument, match="nesting limit"):
        decode_object(data, "x", None)


def test_decode_object_rules() -> None:
    assert decode_object(b"", "x", 10) == {}
    assert decode_object(b'{"a": 1}', "x", 10) == {"a": 1}
    with pytest.raises(InvalidArgument, match="x is 12 bytes; the limit is 10 bytes") as refused:
        decode_object(b'{"a": 12345}', "x", 10)
    assert "WIGGLE_MAX_PAYLOAD_BYTES" in str(refused.value)  # the setting to change (a trial)
    assert decode_object(b'{"a": 12345}', "x", None) == {"a": 12345}  # None: the engine checks the size
    with pytest.raises(InvalidArgument, match="x must be a JSON object, got list"):
        decode_object(b"[1]", "x", None)
    with pytest.raises(InvalidArgument, match="x is not valid JSON"):
        decode_object(b"{", "x", None)


@given(
    st.integers(MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH + 3), st.lists(st.sampled_from(["]", "[", "}", '"', "\\"]))
)
def test_exact_limit_with_brackets_in_strings(depth: int, noise: list[str]) -> None:
    value: object = "".join(noise)
    for level in range(depth):  # alternate arrays and objects, with bracket-laden strings beside
        value = [value, "]]"] if level % 2 else {"k]": value, "v": "[{"}
    data = msgspec.json.encode(value)
    if depth <= MAX_JSON_DEPTH:
        check_depth(data, "x")
        assert msgspec.json.decode(data) == value  # and the decoder copes at that depth
    else:
        with pytest.raises(InvalidArgument, match="nesting limit"):
            check_depth(data, "x")
