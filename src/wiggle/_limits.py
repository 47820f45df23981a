"""The numeric limits of a definition and the checks that enforce them (durations, counts).

Shared by the model's types (``wiggle._model``) and its graph validation
(``wiggle._model_validate``); ``wiggle._model`` re-exports the public ones.
"""

from __future__ import annotations

import math
from decimal import Decimal

from .errors import InvalidArgument

__all__ = [
    "DEFAULT_FOR_EACH_CONCURRENCY",
    "MAX_FOR_EACH_ITEMS",
    "MAX_FOR_EACH_CONCURRENCY",
    "MAX_DURATION_MILLIS",
    "MAX_COUNT",
    "MAX_BACKOFF_MULTIPLIER",
    "seconds_to_millis",
    "check_millis",
    "check_count",
    "check_positive_count",
    "exact_millis",
    "MAX_ERROR_CHARS",
    "storable_text",
    "MAX_REASON_CHARS",
    "check_text",
    "MAX_POLL_QUEUES",
]


#: Branches of a FOR_EACH running at once when the node sets no ``concurrency``: a large list is
#: started a slice at a time, never one token per element in one transaction.
DEFAULT_FOR_EACH_CONCURRENCY = 100

#: The most elements a FOR_EACH list may have, and so the largest ``concurrency`` a FOR_EACH node
#: may set (more branches at once than elements is never of use). A longer list refuses the start
#: when the node is reached at start, and fails the instance when a step produces it later, both
#: naming the node, the list's length and this limit.
MAX_FOR_EACH_ITEMS = 100_000

#: The largest ``concurrency`` a FOR_EACH node may set: the branches one drive starts at once stay
#: well inside its runaway guard (EngineConfig.max_drive_moves, 10,000 moves).
MAX_FOR_EACH_CONCURRENCY = 1_000

#: The longest duration a definition may hold (sleeps, user-task timeouts, retry backoffs):
#: ten years of 365.25 days, in milliseconds. Far beyond any real wait, and far inside the
#: 64-bit millisecond timestamps the stores keep (a sleep of 2**63-1 ms used to be accepted and
#: then overflowed the store on the next start).
MAX_DURATION_MILLIS = 315_576_000_000

#: The largest count a definition may hold (retry attempts, max_local_steps): 2**31 - 1.
MAX_COUNT = 2**31 - 1

#: The longest period of a rate limit (a queue's, a step's): a day (a longer one is a quota, not
#: a rate).
MAX_RATE_PERIOD_MILLIS = 24 * 3600 * 1000

#: The largest retry multiplier: beyond it the backoff reaches its cap after one or two attempts.
MAX_BACKOFF_MULTIPLIER = 1000.0


def seconds_to_millis(value: object, what: str) -> int:
    """Whole milliseconds of ``value`` seconds (an int or float), bounded by MAX_DURATION_MILLIS.

    InvalidArgument naming ``what`` for a non-number, NaN, infinity, a negative value or one
    above the limit.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidArgument(f"{what} must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise InvalidArgument(f"{what} must not be negative")
    if value * 1000 > MAX_DURATION_MILLIS:
        raise InvalidArgument(
            f"{what} is {value!r} seconds; the limit is {MAX_DURATION_MILLIS // 1000} seconds (10 years)"
        )
    return int(value * 1000)


def check_millis(value: object, field: str, where: str) -> None:
    """A duration field in milliseconds: an int in [0, MAX_DURATION_MILLIS]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{where}: {field} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{where}: {field} must be >= 0, got {value}")
    if value > MAX_DURATION_MILLIS:
        raise InvalidArgument(
            f"{where}: {field} is {value}; the limit is {MAX_DURATION_MILLIS} milliseconds (10 years)"
        )


def check_count(value: object, field: str, where: str, what_zero: str, limit: int = MAX_COUNT) -> None:
    """A count field: an int in [0, ``limit``] (MAX_COUNT unless the field has a smaller one);
    ``what_zero`` says what 0 means."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{where}: {field} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{where}: {field} must be >= 0 ({what_zero}), got {value}")
    if value > limit:
        raise InvalidArgument(f"{where}: {field} is {value}; the limit is {limit}")


def check_positive_count(value: object, field: str, where: str, limit: int = MAX_COUNT) -> None:
    """A count that must be 1 or more (a limit's ``max``): an int in [1, ``limit``]. Every value
    below 1 gets the one message; a negative one was told ">= 0" by check_count, which 0 then
    contradicted (an outside trial)."""
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise InvalidArgument(f"{where}: {field} must be at least 1, got {value}")
    check_count(value, field, where, "", limit)  # its type and its upper bound


def exact_millis(seconds: int | float) -> Decimal:
    """The milliseconds of ``seconds`` as written, exactly: from its repr, so 0.007 s is 7 ms (where
    ``0.007 * 1000`` is 7.000000000000001). Tells a rate period that is a whole number of ms (the
    unit the stores count rates in) from one they would round."""
    return Decimal(repr(seconds)) * 1000


#: The most characters of an error message kept (a token's last error, an instance's error).
MAX_ERROR_CHARS = 4_000

#: What a payload-limit refusal adds, so that the person reading it knows the setting and the way
#: out (an outside trial: "the limit is 1048576 bytes" named neither).
PAYLOAD_REMEDY = (
    " (the server's WIGGLE_MAX_PAYLOAD_BYTES; keep large data outside the context, e.g. in object"
    " storage, and pass a reference)"
)


def over_payload(what: str, size: int, limit: int) -> str:
    """The refusal of ``what`` (a context, a step result...) of ``size`` bytes over the payload
    ``limit``: the same words from the engine, the wire, the worker and the upstream port."""
    return f"{what} is {size} bytes; the limit is {limit} bytes{PAYLOAD_REMEDY}"


def storable_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, a NUL character replaced by U+FFFD.

    For text a worker or an operator sends and the stores keep as text (failure messages,
    tracebacks): PostgreSQL cannot store a NUL in a text column, and a report must never be lost
    to one (nor behave differently on the memory store).
    """
    text = text[:limit]
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


#: The most characters of a reason a person gives (a cancel).
MAX_REASON_CHARS = 200


def check_text(value: str, what: str, limit: int) -> None:
    """InvalidArgument unless ``value`` has at most ``limit`` characters and no NUL character
    (PostgreSQL cannot store one in text: refused on every store alike)."""
    if len(value) > limit:
        raise InvalidArgument(f"{what} is {len(value)} characters; the limit is {limit}")
    if "\x00" in value:
        raise InvalidArgument(f"{what} contains a NUL character (\\x00)")


#: The most queue names one poll may list (PollTasks, a WorkerSession poll, upstream's PollTasks),
#: and one report's ``next_queues``. The server keeps a poll's queues for the Queues page and
#: ListQueues (ten minutes after the worker's last poll), so an unbounded list would be kept as
#: sent; a worker serving more queues than this runs more workers, each on a share of them.
MAX_POLL_QUEUES = 1_000
