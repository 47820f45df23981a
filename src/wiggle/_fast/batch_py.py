"""Batch serialization of step records, the pure-Python reference twin of batch_c.pyx.

The Python worker reports a local run (AdvanceRun ``steps_batch``) as one compact JSON array,
one element per executed step, in order; each element is a step record of
``wiggle._engine.records`` in its array form:

- ``["T", node_id, {changed keys}, [removed keys]]``: TaskDone, a TASK as its shallow context diff;
- ``["P", node_id, true|false]``: PredicateDone, a PREDICATE and the branch it chose;
- ``["F", node_id, message, retryable]``: StepFailed, a step that raised.

``decode_batch`` lets msgspec decode a valid batch straight into the records. A batch msgspec
refuses is walked again, untyped, to raise the ValueError this module has always raised, naming
the offending element in the worker's terms (both twins word every message the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import msgspec

from .._engine.records import BatchRecord, StepRecord

__all__ = ["encode_batch", "decode_batch", "MAX_BATCH_STEPS"]

#: A batch longer than this is refused (a worker's local_batch_size is far smaller).
MAX_BATCH_STEPS = 10_000

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
_typed_decoder = msgspec.json.Decoder(Annotated[list[BatchRecord], msgspec.Meta(max_length=MAX_BATCH_STEPS)])


def encode_batch(steps: Sequence[StepRecord]) -> bytes:
    """Encode step records (see the module docstring) as compact JSON bytes."""
    return _encoder.encode(steps)


def decode_batch(data: bytes) -> list[BatchRecord]:
    """Decode and validate a batch into step records; ValueError names the first bad element."""
    try:
        return _typed_decoder.decode(data)
    except msgspec.DecodeError:
        pass
    _explain(data)
    # msgspec refused something the walk accepts: never expected, but never silently accepted.
    try:
        _typed_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"steps_batch is not a valid batch: {exc}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _explain(data: bytes) -> None:
    """Raise the ValueError that describes why ``data`` is not a valid batch."""
    try:
        raw = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"steps_batch is not valid JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ValueError(f"steps_batch must be a JSON array, got {type(raw).__name__}")
    if len(raw) > MAX_BATCH_STEPS:
        raise ValueError(f"steps_batch has {len(raw)} steps; the limit is {MAX_BATCH_STEPS}")
    for index, item in enumerate(raw):
        _check_item(index, item)


def _check_item(index: int, item: Any) -> None:
    if not isinstance(item, list) or len(item) < 3 or not isinstance(item[1], str):
        raise ValueError(f"steps_batch[{index}] must be [kind, node_id, ...]")
    tag = item[0]
    if tag == "T":
        if len(item) != 4 or not isinstance(item[2], dict) or not isinstance(item[3], list):
            raise ValueError(f"steps_batch[{index}] (T) must be ['T', node_id, {{changed}}, [removed]]")
        for key in item[3]:
            if not isinstance(key, str):
                raise ValueError(f"steps_batch[{index}] (T): removed keys must be strings")
    elif tag == "P":
        if len(item) != 3 or not isinstance(item[2], bool):
            raise ValueError(f"steps_batch[{index}] (P) must be ['P', node_id, true|false]")
    elif tag == "F":
        if len(item) != 4 or not isinstance(item[2], str) or not isinstance(item[3], bool):
            raise ValueError(f"steps_batch[{index}] (F) must be ['F', node_id, message, retryable]")
    else:
        raise ValueError(f"steps_batch[{index}] has unknown kind {tag!r} (expected T, P or F)")
