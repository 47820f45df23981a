"""Batch serialization (encode_batch, decode_batch) and the golden batches, on each implementation."""

from __future__ import annotations

from pathlib import Path

import pytest

from wiggle._engine.records import ContextSet, PredicateDone, StepFailed, StepRecord, TaskDone

from .conftest import Impl

GOLDEN_DIR = Path(__file__).parent / "golden"

# The records each golden batch holds. The .json files were written once, by the pure twin, and
# are never regenerated: an implementation (or a msgspec upgrade) that changes a byte fails here.
GOLDEN = {
    "empty": [],
    "tasks": [
        TaskDone(
            "fetch",
            {"order": {"id": 42, "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]}},
            [],
        ),
        TaskDone(
            "price",
            {"total": 19.99, "discount": 0.1, "tax": 1.5e-10, "big": 1e300, "neg_zero": -0.0},
            ["draft"],
        ),
        TaskDone("limits", {"max_u64": 18446744073709551615, "min_i64": -9223372036854775808, "zero": 0}, []),
        TaskDone(
            "text",
            {"greeting": "héllo wörld ✓ 🚀", "quote": 'say "hi"\\now', "ctl": "a\nb\tc\u0000\u001f"},
            [],
        ),
        TaskDone("nothing", {}, ["a", "b", "c"]),
        TaskDone(
            "nulls", {"none": None, "flags": [True, False, None], "empty": {"l": [], "d": {}}}, ["gone"]
        ),
    ],
    "predicates": [PredicateDone("is_large", True), PredicateDone("is_small", False)],
    "failures": [
        StepFailed("charge", "PaymentDeclined: card ending 4242 was declined", False),
        StepFailed("ship", 'TimeoutError("carrier API")\nTraceback: line 1 — «ünïcode»', True),
        StepFailed("empty_message", "", True),
    ],
    "local_run": [
        TaskDone("fetch", {"order_id": "o-1", "amount": 120}, []),
        PredicateDone("check", True),
        TaskDone("reserve", {"reserved": True, "warehouse": "w-3"}, []),
        TaskDone("price", {"amount": 108.0, "coupon": None}, ["quote"]),
        PredicateDone("needs_review", False),
        TaskDone("notify", {"notified": ["alice@example.invalid"]}, []),
        StepFailed("invoice", "ConnectionResetError: peer closed", True),
    ],
}


# golden batches ---------------------------------------------------------------------------------


def test_the_golden_files_are_the_golden_records() -> None:
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.json")) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_batch_decodes_to_its_records(impl: Impl, name: str) -> None:
    data = (GOLDEN_DIR / f"{name}.json").read_bytes()
    records = impl.batch.decode_batch(data)
    assert records == GOLDEN[name]
    assert all(type(r) in (TaskDone, PredicateDone, StepFailed) for r in records)
    # the same types too: 1 == 1.0 == True, but they are different JSON
    assert repr(records) == repr(GOLDEN[name])


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_batch_reencodes_byte_identically(impl: Impl, name: str) -> None:
    data = (GOLDEN_DIR / f"{name}.json").read_bytes()
    assert impl.batch.encode_batch(impl.batch.decode_batch(data)) == data
    assert impl.batch.encode_batch(GOLDEN[name]) == data


# encode -----------------------------------------------------------------------------------------


def test_encode_is_compact_json(impl: Impl) -> None:
    steps: list[StepRecord] = [
        TaskDone("a", {"x": 1}, ["y"]),
        PredicateDone("b", False),
        StepFailed("c", "boom", True),
    ]
    assert (
        impl.batch.encode_batch(steps) == b'[["T","a",{"x":1},["y"]],["P","b",false],["F","c","boom",true]]'
    )
    assert impl.batch.encode_batch([]) == b"[]"
    assert type(impl.batch.encode_batch([])) is bytes


def test_encode_of_old_tuples_and_lists_gives_the_same_bytes(impl: Impl) -> None:
    # The records' array form is the old tuple format: a worker not yet moved to records still
    # sends the same batch.
    assert impl.batch.encode_batch([["P", "b", True]]) == b'[["P","b",true]]'
    assert impl.batch.encode_batch([("T", "a", {"x": 1}, [])]) == impl.batch.encode_batch(
        [TaskDone("a", {"x": 1}, [])]
    )


def test_a_context_set_is_not_part_of_the_batch_format(impl: Impl) -> None:
    # A ContextSet is not part of the batch format: it encodes, and decode names its kind.
    data = impl.batch.encode_batch([ContextSet("n", {"x": 1})])
    assert data == b'[["C","n",{"x":1}]]'
    with pytest.raises(ValueError, match=r"unknown kind 'C' \(expected T, P or F\)"):
        impl.batch.decode_batch(data)


def test_encode_errors_match_the_reference(impl: Impl, reference: Impl) -> None:
    bad_batches: list[list[object]] = [
        [TaskDone("a", {"x": object()}, [])],
        [TaskDone("a", {"x": 1j}, [])],
        [object()],
    ]
    for bad in bad_batches:
        with pytest.raises(Exception) as expected:
            reference.batch.encode_batch(bad)
        with pytest.raises(type(expected.value)) as got:
            impl.batch.encode_batch(bad)
        assert str(got.value) == str(expected.value)


# decode -----------------------------------------------------------------------------------------


def test_decode_round_trips(impl: Impl) -> None:
    steps: list[StepRecord] = [
        TaskDone("a", {"x": [1, {"y": None}]}, ["z"]),
        PredicateDone("b", True),
        StepFailed("c", "boom", False),
    ]
    assert impl.batch.decode_batch(impl.batch.encode_batch(steps)) == steps


def test_decode_accepts_str_bytearray_and_memoryview(impl: Impl) -> None:
    for data in ('[["P","n",true]]', bytearray(b'[["P","n",true]]'), memoryview(b'[["P","n",true]]')):
        assert impl.batch.decode_batch(data) == [PredicateDone("n", True)]


def test_decode_allows_whitespace(impl: Impl) -> None:
    assert impl.batch.decode_batch(b' [ [ "P" , "n" , false ] ]\n') == [PredicateDone("n", False)]


def test_decode_accepts_the_limit_and_refuses_one_more(impl: Impl) -> None:
    limit = impl.batch.MAX_BATCH_STEPS
    assert limit == 10_000
    ok = b"[" + b",".join([b'["P","n",true]'] * limit) + b"]"
    assert len(impl.batch.decode_batch(ok)) == limit
    too_many = b"[" + b",".join([b'["P","n",true]'] * (limit + 1)) + b"]"
    with pytest.raises(ValueError) as info:
        impl.batch.decode_batch(too_many)
    assert str(info.value) == "steps_batch has 10001 steps; the limit is 10000"


REJECTIONS = [
    # not JSON at all: the message carries msgspec's own words
    (b"", "steps_batch is not valid JSON: Input data was truncated"),
    (b"[", "steps_batch is not valid JSON: Input data was truncated"),
    (b"nope", "steps_batch is not valid JSON: JSON is malformed: invalid character (byte 4)"),
    (b"[] []", "steps_batch is not valid JSON: JSON is malformed: trailing characters (byte 4)"),
    # not an array
    (b"{}", "steps_batch must be a JSON array, got dict"),
    (b'"T"', "steps_batch must be a JSON array, got str"),
    (b"1", "steps_batch must be a JSON array, got int"),
    (b"1.5", "steps_batch must be a JSON array, got float"),
    (b"true", "steps_batch must be a JSON array, got bool"),
    (b"null", "steps_batch must be a JSON array, got NoneType"),
    # elements that are not [kind, node_id, ...]
    (b'["T"]', "steps_batch[0] must be [kind, node_id, ...]"),
    (b"[{}]", "steps_batch[0] must be [kind, node_id, ...]"),
    (b'[["P","n",true],["P","n"]]', "steps_batch[1] must be [kind, node_id, ...]"),
    (b"[[]]", "steps_batch[0] must be [kind, node_id, ...]"),
    (b'[["T",1,{},[]]]', "steps_batch[0] must be [kind, node_id, ...]"),
    (b'[["T",null,{},[]]]', "steps_batch[0] must be [kind, node_id, ...]"),
    # unknown kinds
    (b'[["X","n",1]]', "steps_batch[0] has unknown kind 'X' (expected T, P or F)"),
    (b'[["t","n",{},[]]]', "steps_batch[0] has unknown kind 't' (expected T, P or F)"),
    (b'[["TT","n",{},[]]]', "steps_batch[0] has unknown kind 'TT' (expected T, P or F)"),
    (b'[["","n",{},[]]]', "steps_batch[0] has unknown kind '' (expected T, P or F)"),
    (b'[[1,"n",{},[]]]', "steps_batch[0] has unknown kind 1 (expected T, P or F)"),
    (b'[[null,"n",{},[]]]', "steps_batch[0] has unknown kind None (expected T, P or F)"),
    (b'[[["T"],"n",{},[]]]', "steps_batch[0] has unknown kind ['T'] (expected T, P or F)"),
    (b'[[true,"n",{},[]]]', "steps_batch[0] has unknown kind True (expected T, P or F)"),
    # T
    (b'[["T","n",{}]]', "steps_batch[0] (T) must be ['T', node_id, {changed}, [removed]]"),
    (b'[["T","n",{},[],1]]', "steps_batch[0] (T) must be ['T', node_id, {changed}, [removed]]"),
    (b'[["T","n",[],[]]]', "steps_batch[0] (T) must be ['T', node_id, {changed}, [removed]]"),
    (b'[["T","n",{},{}]]', "steps_batch[0] (T) must be ['T', node_id, {changed}, [removed]]"),
    (b'[["T","n",{},null]]', "steps_batch[0] (T) must be ['T', node_id, {changed}, [removed]]"),
    (b'[["T","n",{},["a",1]]]', "steps_batch[0] (T): removed keys must be strings"),
    (b'[["T","n",{},[null]]]', "steps_batch[0] (T): removed keys must be strings"),
    # P
    (b'[["P","n",1]]', "steps_batch[0] (P) must be ['P', node_id, true|false]"),
    (b'[["P","n",null]]', "steps_batch[0] (P) must be ['P', node_id, true|false]"),
    (b'[["P","n",true,false]]', "steps_batch[0] (P) must be ['P', node_id, true|false]"),
    (b'[["P","n","true"]]', "steps_batch[0] (P) must be ['P', node_id, true|false]"),
    # F
    (b'[["F","n","boom"]]', "steps_batch[0] (F) must be ['F', node_id, message, retryable]"),
    (b'[["F","n","boom",1]]', "steps_batch[0] (F) must be ['F', node_id, message, retryable]"),
    (b'[["F","n",null,true]]', "steps_batch[0] (F) must be ['F', node_id, message, retryable]"),
    (b'[["F","n","boom",true,1]]', "steps_batch[0] (F) must be ['F', node_id, message, retryable]"),
    # the first bad element is the one named
    (
        b'[["P","a",true],["T","b",{},[]],["Q","c",1],["P","d"]]',
        "steps_batch[2] has unknown kind 'Q' (expected T, P or F)",
    ),
]


@pytest.mark.parametrize(("data", "message"), REJECTIONS)
def test_decode_rejections(impl: Impl, data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as info:
        impl.batch.decode_batch(data)
    assert str(info.value) == message
    assert info.value.__cause__ is None


def test_invalid_json_hides_the_decoder_error(impl: Impl) -> None:
    with pytest.raises(ValueError) as info:
        impl.batch.decode_batch(b"[1,")
    assert info.value.__suppress_context__


def test_decode_of_a_non_buffer_is_a_type_error_like_the_reference(impl: Impl, reference: Impl) -> None:
    for bad in (None, 5, ["P", "n", True]):
        with pytest.raises(TypeError) as expected:
            reference.batch.decode_batch(bad)
        with pytest.raises(TypeError) as got:
            impl.batch.decode_batch(bad)
        assert str(got.value) == str(expected.value)
