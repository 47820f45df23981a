"""The requests both clients send, built once: each argument checked and turned into its wire
fields, with an InvalidArgument that names the argument before anything is sent.

wiggle/_client/aio.py calls these (and wiggle/_client/sync.py, generated from it); the waits,
the result check and the errors of a call that got no answer are in wiggle/_client/core.py.
"""

from __future__ import annotations

import getpass
import math
import re
import socket
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec

from .._json_values import described, described_foreign, foreign, non_finite_in
from .._limits import MAX_DURATION_MILLIS, MAX_RATE_PERIOD_MILLIS, exact_millis
from .._model import NodeKind, WorkflowDefinition
from .._rpc import wiggle_pb2 as pb
from ..errors import InvalidArgument
from ..workflow import Blueprint, Workflow
from .types import InstanceInfo

__all__ = [
    "instance_id_of",
    "workflow_name",
    "text_of",
    "renamed",
    "epoch_millis",
    "register_request",
    "start_options",
    "start_request",
    "queue_limit_request",
    "list_request",
    "context_filter",
    "complete_user_task_request",
    "signal_request",
    "retry_request",
    "schedule_spec",
    "who_asks",
    "START_CHUNK",
    "START_CHUNK_BYTES",
    "StartChunks",
]

_encode_json = msgspec.json.Encoder().encode


def _context_json(context: Any, what: str = "the context", argument: str | None = None) -> bytes:
    """``context`` as JSON; InvalidArgument if it holds a NaN or an infinity, which JSON would
    store as null (wiggle/_json_values.py), naming ``what`` and where in it. With ``argument``
    (a start's context), also if it is not an object, naming that argument (``_as_object``)."""
    if context is None:
        return b""
    if isinstance(context, dict):  # a Struct's own fields are its type's: it decodes them back
        found = foreign(context)
        if found is not None:  # JSON would hold it as another type (wiggle/_json_values.py)
            raise InvalidArgument(described_foreign(what, found))
    builtins = msgspec.to_builtins(context) if argument is None else _as_object(context, argument)
    return _checked_json(builtins, what)


def _as_object(value: Any, argument: str) -> Any:
    """``value`` (a dict, a msgspec.Struct, a dataclass...) as builtins; InvalidArgument naming
    ``argument`` unless it is a JSON object. The server refuses anything else too, but by its wire
    field (``context_json must be a JSON object, got list``: wiggle/_wire/payload.py), which names
    nothing the caller wrote: a start's context, a signal's or a user task's ``data`` and a
    resume's ``context`` are checked here (tests/conformance/test_signals.py and test_resume.py
    hold the server's own refusal, sent past the client). A payload over the server's limit, which
    only the server knows, is its refusal renamed (``renamed``)."""
    builtins = msgspec.to_builtins(value)
    if not isinstance(builtins, dict):
        raise InvalidArgument(
            f"{argument} must be a dict (a JSON object) or a msgspec.Struct, got {type(value).__name__}"
        )
    return builtins


def renamed(exc: InvalidArgument, wire: str, argument: str) -> InvalidArgument:
    """The server's refusal ``exc`` of the wire field ``wire`` (``context_json is 2000008 bytes;
    the limit is 1048576 bytes ...``: the payload limit is the server's setting) as naming the
    caller's ``argument`` instead; any other refusal as it is."""
    text = str(exc)
    if text.startswith(wire + " "):
        return InvalidArgument(argument + text[len(wire) :])
    return exc


def chunk_refused(exc: InvalidArgument, first_index: int, request_id: str) -> InvalidArgument:
    """The server's refusal ``exc`` of one of start_many's chunks (``contexts_json[3] is 2000008
    bytes ...``, counted in the chunk) as naming the caller's context by its index in the whole
    list, as the client's own checks do (``context 1003 ...``), and saying which were started."""
    text = str(exc)
    found = re.match(r"contexts_json\[(\d+)\] ", text)
    if found is None:
        return exc
    message = f"context {first_index + int(found.group(1))} {text[found.end() :]}"
    if first_index:  # the calls before this one started theirs
        again = " (repeated with the same request_id, the call starts only the rest)"
        message += f"; contexts 0 to {first_index - 1} were started" + (again if request_id else "")
    return InvalidArgument(message)


def _checked_json(builtins: Any, what: str) -> bytes:
    data = _encode_json(builtins)
    found = non_finite_in(data, builtins)
    if found is not None:
        raise InvalidArgument(described(what, found))
    return data


def _checked_type(workflow: str | Blueprint[Any]) -> type | None:
    """The msgspec.Struct a start's context must fit, for a Blueprint typed so whose first node
    is a step or a predicate (its handler gets the start's context as it is); else None: a name
    (its registered type is not known here), a dict-typed blueprint, or one that waits first (a
    user task's or a signal's data may complete the context before any handler sees it)."""
    if not isinstance(workflow, Blueprint) or workflow.context_type is dict:
        return None
    definition = workflow.definition
    first = next((n for n in definition.nodes if n.id == definition.start_node), None)
    if first is None or first.kind not in (NodeKind.TASK, NodeKind.PREDICATE):
        return None
    return workflow.context_type


def _start_context_json(workflow: str | Blueprint[Any], context: Any, which: str = "") -> bytes:
    """A start's context as JSON; given a Blueprint whose context type is a msgspec.Struct (and
    whose first node is a step: ``_checked_type``), first checked against that type as the step
    converts it: InvalidArgument naming the workflow and what does not fit, before anything is
    sent, instead of a step failing its attempts. ``which``: "context 3" in a bulk start."""
    ctype = _checked_type(workflow)
    if ctype is None:
        return _context_json(context, which or "the context", which or "context")
    name = workflow.name if isinstance(workflow, Blueprint) else workflow
    what = f"{which or 'context'} of workflow {name!r} does not fit {ctype.__name__}"
    if isinstance(context, msgspec.Struct):
        if not isinstance(context, ctype):
            raise InvalidArgument(
                f"{what}: got a Struct of type {type(context).__name__} (pass one of type {ctype.__name__}, "
                "or a dict of its fields)"
            )
        return _context_json(context, which or "the context")
    builtins = {} if context is None else msgspec.to_builtins(context)
    try:
        msgspec.convert(builtins, ctype)  # what the worker does with the JSON (wiggle/_worker/loaded.py)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{what}: {exc}") from None
    return b"" if context is None else _checked_json(builtins, which or "the context")


def workflow_name(workflow: str | Blueprint[Any], call: str, argument: str = "") -> str:
    """The workflow a call names: a Blueprint's name, or the name given. The Workflow builder (a
    ``.build()`` forgotten) and any other value are TypeError naming ``call`` (and ``argument``,
    where it is not the first) and what to pass; before, the builder met protobuf's "bad argument
    type for built-in operation", and so did a Blueprint given to ``list``, ``get_workflow``,
    ``list_workflows`` or ``list_schedules``: they take one now, as ``start`` does."""
    if isinstance(workflow, Blueprint):
        return workflow.name
    if isinstance(workflow, str):
        return workflow
    takes = f"{call} takes a workflow name or a Blueprint" + (f" as {argument}" if argument else "")
    if isinstance(workflow, Workflow):
        raise TypeError(f"{takes}, got the Workflow builder {workflow.name!r}: call .build() on it")
    raise TypeError(f"{takes}, got {type(workflow).__name__}")


def register_request(workflow: Blueprint[Any] | WorkflowDefinition) -> pb.RegisterWorkflowRequest:
    """RegisterWorkflow for a Blueprint or a WorkflowDefinition."""
    if isinstance(workflow, Blueprint):
        definition = workflow.definition
    elif isinstance(workflow, WorkflowDefinition):
        definition = workflow
    elif isinstance(workflow, Workflow):  # the builder: a common slip
        raise TypeError(
            f"register() takes a Blueprint or WorkflowDefinition, got the Workflow builder "
            f"{workflow.name!r}: call .build() on it (client.register(flow.build()))"
        )
    else:
        raise TypeError(f"register() takes a Blueprint or WorkflowDefinition, got {type(workflow).__name__}")
    return pb.RegisterWorkflowRequest(definition_json=definition.to_json())


def _duration_millis(value: object, what: str) -> int:
    """Whole milliseconds (rounded up) of a timedelta or a number of seconds; InvalidArgument
    naming ``what`` for anything else, a negative one or one over MAX_DURATION_MILLIS."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        negative = value < timedelta(0)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        seconds = float(value)
        negative = value < 0
    else:
        raise InvalidArgument(f"{what} must be a timedelta (or seconds), got {value!r}")
    if negative:  # in seconds: a timedelta's repr of -1 s is "timedelta(days=-1, seconds=86399)"
        raise InvalidArgument(f"{what} must not be negative, got {seconds:g} s")
    if seconds * 1000 > MAX_DURATION_MILLIS:  # the server's limit; far beyond it cannot even be sent
        raise InvalidArgument(
            f"{what} is {seconds:g} seconds; the limit is {MAX_DURATION_MILLIS // 1000} seconds (10 years)"
        )
    return math.ceil(seconds * 1000)


def _rate_period_millis(value: object) -> int:
    """``rate_period`` in milliseconds, the unit the stores count a queue's rate in; InvalidArgument
    for a period that is not a whole number of them (0.0001 s was sent as 1 ms and 0.0016 s as
    2 ms: an outside trial), one under 1 ms in the server's words (wiggle/_storage/queue_limits.py)."""
    _duration_millis(value, "rate_period")  # a timedelta or seconds, not negative, not over 10 years
    if isinstance(value, timedelta):
        exact = Decimal(value // timedelta(microseconds=1)) / 1000
        given = f"{value.total_seconds()!r} s"
    else:
        assert isinstance(value, (int, float))
        exact = exact_millis(value)
        given = f"{value!r} s"
    if exact == exact.to_integral_value():
        return int(exact)
    shown = f"{exact.normalize():f} ms (rate_period={given})"
    if exact < 1:
        raise InvalidArgument(
            f"a rate limit needs a period from 1 ms to {MAX_RATE_PERIOD_MILLIS} ms (a day), got {shown}"
        )
    raise InvalidArgument(
        f"rate_period must be a whole number of milliseconds (a queue's rate is counted in them), got "
        f"{shown}: give {math.floor(exact)} ms or {math.ceil(exact)} ms"
    )


def instance_id_of(instance: object, what: str = "instance_id") -> str:
    """The instance id a call names: the id itself, or the ``InstanceInfo`` a start, ``get`` or
    ``wait`` returned (the test kit's calls take either: wiggle/_testing/environment.py).
    InvalidArgument naming ``what`` for anything else, before protobuf's bare TypeError."""
    if isinstance(instance, str):
        return instance
    if isinstance(instance, InstanceInfo):
        return instance.instance_id
    raise InvalidArgument(
        f"{what} must be an instance id (a str) or an InstanceInfo, got {type(instance).__name__}"
    )


def text_of(value: object, argument: str, *, none: bool = False) -> str:
    """``value`` if it is a str (None too, as "", with ``none``); InvalidArgument naming
    ``argument`` for anything else: protobuf's "bad argument type for built-in operation" named
    nothing (``signal(iid, 5)``, ``start(..., correlation_id=42)``)."""
    if isinstance(value, str):
        return value
    if value is None and none:
        return ""
    raise InvalidArgument(f"{argument} must be a string, got {type(value).__name__}")


def _aware(value: datetime, argument: str) -> datetime:
    """``value`` if it is timezone-aware; InvalidArgument naming ``argument`` otherwise."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(
            f"{argument} must be timezone-aware, got the naive datetime {value.isoformat()} "
            "(say which zone: e.g. datetime(..., tzinfo=timezone.utc))"
        )
    return value


def epoch_millis(value: object, argument: str) -> int:
    """A time filter (``list``'s ``created_after``, ``created_before``): a timezone-aware
    datetime, or epoch milliseconds (an int; 0: none) as it is. InvalidArgument naming
    ``argument`` for a naive datetime or anything else (a datetime met "'datetime.datetime'
    object cannot be interpreted as an integer")."""
    if isinstance(value, datetime):
        return math.floor(_aware(value, argument).timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            f"{argument} must be a timezone-aware datetime or epoch milliseconds (an int), "
            f"got {type(value).__name__}"
        )
    if not -(2**63) <= value < 2**63:
        raise InvalidArgument(f"{argument} is {value} milliseconds, past what a 64-bit time holds")
    return value


def start_options(
    priority: int = 0,
    start_at: datetime | None = None,
    start_delay: timedelta | float | None = None,
    dedup_key: str = "",
    dedup_window: timedelta | float | None = None,
    timeout: timedelta | float | None = None,
) -> dict[str, Any]:
    """A start's flow-control options as its wire fields (docs/flow-control.md); ``timeout``:
    the start's own workflow time limit (docs/semantics.md#workflow-time-limits; 0: none).

    Refused here with InvalidArgument naming the field when the value cannot be sent as meant (a
    naive datetime, a negative delay or one over the 10-year limit, both a time and a delay); the
    other ranges are the server's to check.
    """
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgument(f"priority must be an integer, got {priority!r}")
    if not -(2**31) <= priority < 2**31:
        raise InvalidArgument(f"priority must be between -100 and 100, got {priority}")
    fields: dict[str, Any] = {"priority": priority}
    if start_at is not None and start_delay is not None:
        raise InvalidArgument("give start_at or start_delay, not both")
    if start_at is not None:
        if not isinstance(start_at, datetime):
            raise InvalidArgument(f"start_at must be a datetime, got {type(start_at).__name__}")
        millis = math.floor(_aware(start_at, "start_at").timestamp() * 1000)
        if millis <= 0:
            raise InvalidArgument(f"start_at must be after the epoch, got {start_at.isoformat()}")
        fields["start_at"] = millis
    if start_delay is not None:
        fields["start_delay_millis"] = _duration_millis(start_delay, "start_delay")
    text_of(dedup_key, "dedup_key")
    if dedup_window is not None:
        if not dedup_key:
            raise InvalidArgument("dedup_window needs a dedup_key")
        fields["dedup_window_millis"] = _duration_millis(dedup_window, "dedup_window")
    if dedup_key:
        fields["dedup_key"] = dedup_key
    if timeout is not None:
        fields["timeout_millis"] = _duration_millis(timeout, "timeout")
    return fields


def queue_limit_request(
    queue: str, max_running: int, rate_max: int, rate_period: timedelta | float | None
) -> pb.QueueLimit:
    """SetQueueLimit's request; InvalidArgument for what cannot be sent as meant (the server
    checks the ranges)."""
    for what, value in (("max_running", max_running), ("rate_max", rate_max)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
            raise InvalidArgument(f"{what} must be an integer from 0 (no limit), got {value!r}")
    if rate_max and rate_period is None:
        raise InvalidArgument("rate_max needs a rate_period (e.g. rate_max=50, rate_period=1.0)")
    period = 0 if rate_period is None else _rate_period_millis(rate_period)
    return pb.QueueLimit(queue=queue, max_running=max_running, rate_max=rate_max, rate_period_millis=period)


def start_request(
    workflow: str | Blueprint[Any],
    context: Any,
    version: str,
    correlation_id: str,
    request_id: str = "",
    options: dict[str, Any] | None = None,
) -> pb.StartInstanceRequest:
    """StartInstance; ``context`` is a dict, a msgspec.Struct or None; ``options`` the fields
    ``start_options`` made."""
    name = workflow_name(workflow, "start()")
    return pb.StartInstanceRequest(
        workflow=name,
        version=text_of(version, "version"),
        context_json=_start_context_json(workflow, context),
        correlation_id=text_of(correlation_id, "correlation_id"),
        request_id=text_of(request_id, "request_id"),
        **(options or {}),
    )


START_CHUNK = 1000  # contexts per StartInstances call (the server accepts up to 10,000)
START_CHUNK_BYTES = 8 << 20  # and at most about this many bytes of contexts per call


class StartChunks:
    """``start_many``'s contexts as StartInstances calls of at most ``chunk_size`` contexts.

    The first call starts the latest version unless ``version`` is given; ``pin`` makes the
    following calls start the version the first one did, so one ``start_many`` starts one version.
    """

    def __init__(
        self,
        workflow: str | Blueprint[Any],
        contexts: Iterable[Any],
        version: str,
        correlation_id: str,
        request_id: str,
        chunk_size: int,
        options: dict[str, Any] | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        self.workflow = workflow
        self.name = workflow_name(workflow, "start_many()")
        self.contexts = iter(contexts)
        self.version = text_of(version, "version")
        self.correlation_id = text_of(correlation_id, "correlation_id")
        self.request_id = text_of(request_id, "request_id")
        self.chunk_size = chunk_size
        self.sent = 0
        # priority and a delayed start, sent with every chunk (a start_delay counts from the
        # server's receipt of each chunk, sent one after the other)
        self.options = dict(options or {})

    def next_request(self) -> pb.StartInstancesRequest | None:
        """The next call, or None once every context was sent."""
        chunk: list[bytes] = []
        size = 0
        for context in self.contexts:
            index = self.sent + len(chunk)
            try:
                data = _start_context_json(self.workflow, context, f"context {index}")
            except InvalidArgument as exc:
                if self.sent:  # the calls before this one started theirs
                    again = " (repeated with the same request_id, the call starts only the rest)"
                    raise InvalidArgument(
                        f"{exc}; contexts 0 to {self.sent - 1} were started"
                        + (again if self.request_id else "")
                    ) from None
                raise
            chunk.append(data)
            size += len(data)
            if len(chunk) >= self.chunk_size or size >= START_CHUNK_BYTES:
                break
        if not chunk:
            return None
        request = pb.StartInstancesRequest(
            workflow=self.name,
            version=self.version,
            contexts_json=chunk,
            correlation_id=self.correlation_id,
            request_id=self.request_id,
            first_index=self.sent,
            **self.options,
        )
        self.sent += len(chunk)
        return request

    def pin(self, version: str) -> None:
        """Start the following chunks at ``version`` (the one the first chunk started)."""
        self.version = version


def _filter_text(field: str, value: object) -> str:
    """A context filter's value as the stores compare it (wiggle/_storage/base.py context_text):
    a str as it is, a bool or a number as its JSON text (True -> "true", 1e20 -> "1e20"); a bool
    was sent as "True" and matched nothing. InvalidArgument naming the field for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))  # an IntEnum's number, not its name
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(
                f"context filter {field!r} is {value!r}: JSON has no NaN or infinity, so no context holds it"
            )
        return _encode_json(value).decode()
    if value is None:
        raise InvalidArgument(
            f"context filter {field!r} is None: a null field never matches (pass a str, a number or a bool)"
        )
    if isinstance(value, (list, tuple, dict)):
        raise InvalidArgument(
            f"context filter {field!r} takes a str, a number or a bool, got {type(value).__name__} (an "
            "object or an array field matches its compact JSON text: pass that string, e.g. '[1,2]')"
        )
    raise InvalidArgument(
        f"context filter {field!r} takes a str, a number or a bool, got {type(value).__name__}"
    )


def context_filter(context: object) -> dict[str, str]:
    """``list(context=...)`` as ListInstances' field -> text map (``_filter_text``)."""
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InvalidArgument(
            f"context must be a dict of field -> value (e.g. {{'customer_id': 'c-42'}}), got {type(context).__name__}"
        )
    filters: dict[str, str] = {}
    for field, value in context.items():
        if not isinstance(field, str):
            raise InvalidArgument(f"context's field names must be strings, got {type(field).__name__}")
        filters[field] = _filter_text(field, value)
    return filters


def list_request(
    workflow: str | Blueprint[Any],
    status: str,
    correlation_id: str,
    created_after: int | datetime,
    created_before: int | datetime,
    page_size: int,
    page_token: str,
    search: Mapping[str, Any] | None = None,
) -> pb.ListInstancesRequest:
    """ListInstances with its filters and paging; ``search``: node, text, context, top_level,
    parent_id, schedule_id, omit_context. Each argument of another type is InvalidArgument (a
    workflow TypeError) naming it, before protobuf's bare TypeError."""
    more = dict(search or {})
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 0 <= page_size < 2**31:
        raise InvalidArgument(
            f"page_size must be a whole number (0: the server's default), got {page_size!r}"
        )
    return pb.ListInstancesRequest(
        workflow=workflow_name(workflow, "list()", "workflow"),
        status=text_of(status, "status"),
        correlation_id=text_of(correlation_id, "correlation_id"),
        created_after=epoch_millis(created_after, "created_after"),
        created_before=epoch_millis(created_before, "created_before"),
        page_size=page_size,
        page_token=text_of(page_token, "page_token"),
        node=text_of(more.get("node"), "node", none=True),
        text=text_of(more.get("text"), "text", none=True),
        context=context_filter(more.get("context")),
        top_level=bool(more.get("top_level")),
        parent_id=text_of(more.get("parent_id"), "parent_id", none=True),
        schedule_id=text_of(more.get("schedule_id"), "schedule_id", none=True),
        omit_context=bool(more.get("omit_context")),
    )


def complete_user_task_request(
    instance_id: str | InstanceInfo, name: str, data: Any
) -> pb.CompleteUserTaskRequest:
    """CompleteUserTask; ``data`` (a dict, a msgspec.Struct or None) merges into the context."""
    return pb.CompleteUserTaskRequest(
        instance_id=instance_id_of(instance_id),
        task_name=text_of(name, "name"),
        payload_json=_context_json(data, "the user task's data", "data"),
    )


def signal_request(
    instance_id: str | InstanceInfo, name: str, data: Any, signal_id: str | None, sender: str
) -> pb.SignalInstanceRequest:
    """SignalInstance; ``data`` (a dict, a msgspec.Struct or None) is the signal's payload."""
    return pb.SignalInstanceRequest(
        instance_id=instance_id_of(instance_id),
        name=text_of(name, "name"),
        data_json=_context_json(data, "the signal's data", "data"),
        signal_id=text_of(signal_id, "signal_id", none=True),
        sender=text_of(sender, "sender"),
    )


def who_asks() -> str:
    """``user@host`` of this process: the default requester recorded by a retry."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def retry_request(
    instance_id: str | InstanceInfo, from_node: str, context: Any, requested_by: str | None
) -> pb.RetryInstanceRequest:
    """RetryInstance; ``context`` (a dict or msgspec.Struct) replaces the context unless None."""
    return pb.RetryInstanceRequest(
        instance_id=instance_id_of(instance_id),
        from_node=text_of(from_node, "from_node"),
        context_json=_context_json(context, "the context", "context") if context is not None else b"",
        replace_context=context is not None,
        requested_by=text_of(requested_by, "requested_by") if requested_by is not None else who_asks(),
    )


def _interval_millis(every: timedelta | float | None) -> int:
    """A schedule's ``every`` (a timedelta or seconds) in whole milliseconds (0: not given);
    InvalidArgument for what cannot be sent (not a duration, NaN, negative, over
    MAX_DURATION_MILLIS); the server checks the rest."""
    if not every:
        return 0
    _duration_millis(every, "every")
    seconds = every.total_seconds() if isinstance(every, timedelta) else every
    return round(seconds * 1000)


def schedule_spec(
    schedule_id: str,
    workflow: str | Blueprint[Any],
    context: Any,
    every: timedelta | float | None,
    cron: str,
    timezone: str | None,
    version: str,
    overlap: str,
    catchup: str,
    catchup_limit: int,
    paused: bool,
    priority: int = 0,
) -> pb.ScheduleSpec:
    """CreateSchedule / UpdateSchedule: ``every`` (a timedelta or seconds), or a 5-field ``cron``
    expression in ``timezone`` (None: UTC). A zone with ``every`` is refused, as the server and
    ``wiggle schedule --every --timezone`` refuse it: an interval ticks whatever the zone, and
    the zone was stored where it meant nothing (an outside trial)."""
    name = workflow_name(workflow, "create_schedule or update_schedule")
    zone = "UTC" if timezone is None else text_of(timezone, "timezone")
    if timezone is not None and every is not None:
        raise InvalidArgument(
            f"timezone {timezone!r} applies to a cron schedule only: every={every!r} ticks every so "
            "many seconds whatever the zone; leave timezone out, or give a cron expression"
        )
    return pb.ScheduleSpec(
        id=text_of(schedule_id, "schedule_id"),
        workflow=name,
        version=text_of(version, "version"),
        interval_millis=_interval_millis(every),
        cron=text_of(cron, "cron"),
        timezone=zone,
        context_json=_start_context_json(workflow, context),
        overlap=str(overlap),
        catchup=str(catchup),
        catchup_limit=catchup_limit,
        paused=paused,
        priority=start_options(priority)["priority"],
    )
