# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Batch serialization of step records, the Cython twin of batch_py.py.

The Python worker reports a local run (AdvanceRun ``steps_batch``) as one compact JSON array,
one element per executed step, in order; each element is a step record of
``wiggle._engine.records`` in its array form:

- ``["T", node_id, {changed keys}, [removed keys]]``: TaskDone, a TASK as its shallow context diff;
- ``["P", node_id, true|false]``: PredicateDone, a PREDICATE and the branch it chose;
- ``["F", node_id, message, retryable]``: StepFailed, a step that raised.

``decode_batch`` lets msgspec decode a valid batch straight into the records. A batch msgspec
refuses is walked again, untyped, to raise the ValueError naming the offending element.

Both twins parse and print JSON with the same msgspec Encoder/Decoders, which is what makes
their bytes and records identical; this twin walks a refused batch in typed C loops.
"""

from typing import Annotated

import msgspec

from wiggle._engine.records import BatchRecord

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_GET_LENGTH, PyUnicode_READ_CHAR

__all__ = ["encode_batch", "decode_batch", "MAX_BATCH_STEPS"]

#: A batch longer than this is refused (a worker's local_batch_size is far smaller).
MAX_BATCH_STEPS = 10_000
cdef Py_ssize_t _MAX_BATCH_STEPS = MAX_BATCH_STEPS

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
_typed_decoder = msgspec.json.Decoder(
    Annotated[list[BatchRecord], msgspec.Meta(max_length=MAX_BATCH_STEPS)]
)

cdef object _encode = _encoder.encode
cdef object _decode = _decoder.decode
cdef object _decode_typed = _typed_decoder.decode
cdef object _DecodeError = msgspec.DecodeError


def encode_batch(steps):
    """Encode step records (see the module docstring) as compact JSON bytes."""
    return _encode(steps)


cdef inline bint _is_list(obj):
    # The decoder only ever makes exact lists, dicts, strs and bools, so exact checks are the
    # pure twin's isinstance checks.
    return type(obj) is list


cdef int _check_removed(list removed, Py_ssize_t index) except -1:
    cdef Py_ssize_t k
    for k in range(PyList_GET_SIZE(removed)):
        if type(<object>PyList_GET_ITEM(removed, k)) is not str:
            raise ValueError(f"steps_batch[{index}] (T): removed keys must be strings")
    return 0


def decode_batch(data):
    """Decode and validate a batch into step records; ValueError names the first bad element."""
    try:
        return _decode_typed(data)
    except _DecodeError:
        pass
    _explain(data)
    # msgspec refused something the walk accepts: never expected, but never silently accepted.
    try:
        _decode_typed(data)
    except _DecodeError as exc:
        raise ValueError(f"steps_batch is not a valid batch: {exc}") from None
    raise AssertionError("unreachable")  # pragma: no cover


cdef int _explain(data) except -1:
    """Raise the ValueError that describes why ``data`` is not a valid batch."""
    try:
        raw = _decode(data)
    except _DecodeError as exc:
        raise ValueError(f"steps_batch is not valid JSON: {exc}") from None
    if not _is_list(raw):
        raise ValueError(f"steps_batch must be a JSON array, got {type(raw).__name__}")
    cdef list items = <list>raw
    cdef Py_ssize_t count = PyList_GET_SIZE(items)
    if count > _MAX_BATCH_STEPS:
        raise ValueError(f"steps_batch has {count} steps; the limit is {MAX_BATCH_STEPS}")
    cdef Py_ssize_t index, size
    cdef Py_UCS4 tag_char
    for index in range(count):
        item = <object>PyList_GET_ITEM(items, index)
        if not _is_list(item):
            raise ValueError(f"steps_batch[{index}] must be [kind, node_id, ...]")
        size = PyList_GET_SIZE(item)
        if size < 3:
            raise ValueError(f"steps_batch[{index}] must be [kind, node_id, ...]")
        node = <object>PyList_GET_ITEM(item, 1)
        if type(node) is not str:
            raise ValueError(f"steps_batch[{index}] must be [kind, node_id, ...]")
        tag = <object>PyList_GET_ITEM(item, 0)
        tag_char = 0
        if type(tag) is str and PyUnicode_GET_LENGTH(tag) == 1:
            tag_char = PyUnicode_READ_CHAR(tag, 0)
        third = <object>PyList_GET_ITEM(item, 2)
        if tag_char == u"T":
            if size != 4 or type(third) is not dict:
                raise ValueError(f"steps_batch[{index}] (T) must be ['T', node_id, {{changed}}, [removed]]")
            fourth = <object>PyList_GET_ITEM(item, 3)
            if type(fourth) is not list:
                raise ValueError(f"steps_batch[{index}] (T) must be ['T', node_id, {{changed}}, [removed]]")
            _check_removed(<list>fourth, index)
        elif tag_char == u"P":
            if size != 3 or type(third) is not bool:
                raise ValueError(f"steps_batch[{index}] (P) must be ['P', node_id, true|false]")
        elif tag_char == u"F":
            if size != 4 or type(third) is not str:
                raise ValueError(f"steps_batch[{index}] (F) must be ['F', node_id, message, retryable]")
            fourth = <object>PyList_GET_ITEM(item, 3)
            if type(fourth) is not bool:
                raise ValueError(f"steps_batch[{index}] (F) must be ['F', node_id, message, retryable]")
        else:
            raise ValueError(f"steps_batch[{index}] has unknown kind {tag!r} (expected T, P or F)")
    return 0
