"""Batch serialization of step results, the pure-Python reference twin of batch_c.pyx.

The Python worker reports a local run (AdvanceRun ``steps_batch``) as one compact JSON array,
one element per executed step, in order:

- ``["T", node_id, {changed keys}, [removed keys]]``: a TASK, as its shallow context diff;
- ``["P", node_id, true|false]``: a PREDICATE and the branch it chose;
- ``["F", node_id, message, retryable]``: a step that raised.

``decode_batch`` validates the shape and raises ValueError naming the offending element.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["encode_batch", "decode_batch", "MAX_BATCH_STEPS"]

#: A batch longer than this is refused (a worker's local_batch_size is far smaller).
MAX_BATCH_STEPS = 10_000

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

Step = tuple[Any, ...]


def encode_batch(steps: list[Step]) -> bytes:
    """Encode step records (tuples as described in the module docstring) as JSON bytes."""
    return _encoder.encode(steps)


def decode_batch(data: bytes) -> list[Step]:
    """Decode and validate a batch; every element becomes a tuple of the documented shape."""
    try:
        raw = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"steps_batch is not valid JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ValueError(f"steps_batch must be a JSON array, got {type(raw).__name__}")
    if len(raw) > MAX_BATCH_STEPS:
        raise ValueError(f"steps_batch has {len(raw)} steps; the limit is {MAX_BATCH_STEPS}")
    out: list[Step] = []
    for index, item in enumerate(raw):
        if not isinstance(item, list) or len(item) < 3 or not isinstance(item[1], str):
            raise ValueError(f"steps_batch[{index}] must be [kind, node_id, ...]")
        tag = item[0]
        node = item[1]
        if tag == "T":
            if len(item) != 4 or not isinstance(item[2], dict) or not isinstance(item[3], list):
                raise ValueError(f"steps_batch[{index}] (T) must be ['T', node_id, {{changed}}, [removed]]")
            for key in item[3]:
                if not isinstance(key, str):
                    raise ValueError(f"steps_batch[{index}] (T): removed keys must be strings")
            out.append(("T", node, item[2], item[3]))
        elif tag == "P":
            if len(item) != 3 or not isinstance(item[2], bool):
                raise ValueError(f"steps_batch[{index}] (P) must be ['P', node_id, true|false]")
            out.append(("P", node, item[2]))
        elif tag == "F":
            if len(item) != 4 or not isinstance(item[2], str) or not isinstance(item[3], bool):
                raise ValueError(f"steps_batch[{index}] (F) must be ['F', node_id, message, retryable]")
            out.append(("F", node, item[2], item[3]))
        else:
            raise ValueError(f"steps_batch[{index}] has unknown kind {tag!r} (expected T, P or F)")
    return out
