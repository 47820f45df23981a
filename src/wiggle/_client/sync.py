"""The blocking client, ``Client``: generated, do not edit.

Made by scripts/gen_sync_client.py from wiggle/_client/aio.py (the asyncio client, which is the
source of truth); tests/server/test_client_drift.py fails when the two drift apart.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc
from google.protobuf.message import Message

from .. import _tracing as tracing
from .._model import WorkflowDefinition
from .._rpc import wiggle_pb2 as pb
from .._security.credentials import Credentials, check_credentials
from .._wire.replies import (
    history_from_pb,
    instance_from_pb,
    queue_from_pb,
    schedule_from_pb,
    signal_result_from_pb,
    workflow_from_pb,
)
from .._wire.status import STOPPING
from ..errors import InvalidArgument, Unavailable
from ..workflow import Blueprint
from . import core, messages
from .batching import StartBatcher, only_start
from .link import Link
from .start_stream import StartStream
from .targets import balancing, join_targets
from .types import HistoryEntry, InstanceInfo, QueueInfo, ScheduleInfo, SignalResult, WorkflowInfo

__all__ = ["Client"]


class Client:
    """A client of the control plane. ``Client("127.0.0.1:7233")``; close it or use ``with``.

    Errors arrive as ``wiggle.errors`` exceptions carrying the server's message.

    A call that is safe to repeat rides through a server restart or fail-over: while the server
    answers UNAVAILABLE it is asked again, with pauses, for up to ``patience`` seconds (30 by
    default; 0: never, Unavailable at once) — every read, ``register``,
    ``cancel``, ``signal`` with a ``signal_id``, a ``start`` or ``start_many`` with a
    ``request_id``, ``update_schedule``, ``pause_schedule``, ``resume_schedule`` and
    ``set_queue_limit`` (``wait`` and ``result`` within their own timeout). The others (a start or
    signal without an id, ``complete_user_task``, ``retry``, ``create_schedule``,
    ``delete_schedule``, ``trigger_schedule``) raise Unavailable at once, for they may or may not
    have happened, unless the server said nothing of them was applied (``Unavailable.not_applied``:
    its database was away). A call that gets no answer within its deadline (30 s) is taken for a
    server away. A client that has never reached its server asks for 3 s at most (a wrong target).
    docs/failover.md#what-a-client-does-while-the-server-is-away.

    Several servers (a list, or ``"a:7233,b:7233"``) get one call each in turn (``balance=
    "round_robin"``), a call made again going to the next; ``balance="pick_first"`` sends every
    call to the first that answers and the next only while it is down
    (docs/failover.md#a-server-without-its-database).

    ``close()`` cuts off the calls in flight and refuses later ones, with ClientClosed
    (docs/api/clients.md#closing-a-client).
    """

    def __init__(
        self,
        target: str | Sequence[str] = core.DEFAULT_TARGET,
        channel: grpc.Channel | None = None,
        *,
        credentials: Credentials | None = None,
        patience: timedelta | float = core.CALL_TIMEOUT,
        balance: str = "round_robin",
    ) -> None:
        seconds = core.seconds_of(patience, "patience")
        if seconds < 0:
            raise ValueError(f"patience must be >= 0 seconds (0: never ask again), got {patience}")
        #: seconds a call safe to repeat is asked again while the server is away (class docstring)
        self.patience = seconds
        # several targets (a list or "a:1,b:2"): one channel that moves to another when one is down
        self.target = join_targets(target)
        check_credentials(credentials)
        #: TLS and token settings; by default from WIGGLE_TLS_CA, WIGGLE_TOKEN, ... (credentials.py)
        self.credentials = credentials if credentials is not None else Credentials.from_env()
        secure = self.credentials.channel_credentials() if channel is None else None
        options = core.CHANNEL_OPTIONS + balancing(self.target, balance) + self.credentials.channel_options()

        def make_channel() -> grpc.Channel:
            if secure is not None:
                return grpc.secure_channel(self.target, secure, options=options)
            return grpc.insecure_channel(self.target, options=options)

        # the channel, its stub and the start stream, and the rules of their lifetime: close, and
        # for the client that awaits, the event loop it serves: its first call's (link.py)
        self._link = Link(self.target, make_channel, channel)
        # concurrent starts of this client share one call (batching.py), sent as messages of one
        # stream (start_stream.py) where the server has it
        self._starts = StartBatcher(self._start_alone, self._start_coalesced)
        # a call has been answered: the target is right, and a server away later is a restart
        # to ride through, not a mistake to report at once (_again_while_away)
        self._reached = False

    @property
    def channel(self) -> grpc.Channel:
        """The underlying channel (a worker shares it)."""
        return self._link.channel()

    @property
    def stub(self) -> Any:
        """The gRPC stub over ``channel`` (the calls of this client use it)."""
        return self._link.stub()

    @property
    def _stream(self) -> StartStream:
        return self._link.stream()

    def close(self) -> None:
        """Close the client; a second close does nothing.

        A call in flight is cut off and raises ClientClosed: it may or may not have been applied
        (a start with a ``request_id``, or a signal with a ``signal_id``, is safe to repeat on a
        new client). A call made afterwards raises ClientClosed at once, and nothing is sent
        (docs/api/clients.md#closing-a-client).
        """
        self._link.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, rpc: Any, request: Message, timeout: float | None = None) -> Any:
        # rpc is a stub method (untyped generated code); the caller converts the reply it returns.
        # Reading ``self.stub`` for it made the link's checks (link.py): the client closed, the
        # event loop of a client that awaits, a blocking call on the loop of its own server
        # (hosting.py). The deadline is read at each call, as the start stream's is.
        if timeout is None:
            timeout = core.CALL_TIMEOUT
        try:
            reply = rpc(request, timeout=timeout, metadata=tracing.outgoing_metadata())
        except BaseException as exc:  # a gRPC error, one past the deadline, or a cut by close()
            raise self._link.error_of(exc, timeout) from None
        self._reached = True
        return reply

    def _call_again(self, rpc: Any, request: Message) -> Any:
        """``_call`` for a call that is safe to repeat (a read, or a write a second time changes
        nothing more): asked again while the server is away (UNAVAILABLE: stopping, restarting,
        failing over; or no answer within the deadline), for up to ``patience`` seconds from the
        first failure (``_again_while_away``)."""
        clock = core.WaitClock(self.patience, from_first_failure=True)
        return self._again_while_away(lambda: self._call(rpc, request), clock)

    def _call_once(self, rpc: Any, request: Message) -> Any:
        """``_call`` for a call that is not safe to repeat: Unavailable at once, saying where it
        looked when the client has never reached its server, as every call's does."""
        return self._again_while_away(lambda: self._call(rpc, request), None)

    def register(self, workflow: Blueprint[Any] | WorkflowDefinition) -> WorkflowInfo:
        """Register a workflow version (a no-op if this exact graph is registered already)."""
        reply = self._call_again(self.stub.RegisterWorkflow, messages.register_request(workflow))
        return workflow_from_pb(reply)

    def get_workflow(self, name: str | Blueprint[Any], version: str = "") -> WorkflowInfo:
        """A registered workflow (``name``, or a Blueprint's; the latest version unless ``version``
        is given)."""
        request = pb.GetWorkflowRequest(
            name=messages.workflow_name(name, "get_workflow()", "name"),
            version=messages.text_of(version, "version"),
        )
        reply = self._call_again(self.stub.GetWorkflow, request)
        return workflow_from_pb(reply)

    def list_workflows(self, name: str | Blueprint[Any] = "") -> builtins.list[WorkflowInfo]:
        """Every registered workflow version (of ``name``, or of a Blueprint's)."""
        request = pb.ListWorkflowsRequest(name=messages.workflow_name(name, "list_workflows()", "name"))
        reply = self._call_again(self.stub.ListWorkflows, request)
        return [workflow_from_pb(w) for w in reply.workflows]

    def start(
        self,
        workflow: str | Blueprint[Any],
        context: Any = None,
        *,
        version: str = "",
        correlation_id: str = "",
        request_id: str = "",
        priority: int = 0,
        start_at: datetime | None = None,
        start_delay: timedelta | float | None = None,
        dedup_key: str = "",
        dedup_window: timedelta | float | None = None,
        timeout: timedelta | float | None = None,
    ) -> InstanceInfo:
        """Start an instance; ``context`` is a dict or msgspec.Struct. Pins ``version`` if given.

        Given the Blueprint itself (not its name) typed with a msgspec.Struct, a context that
        does not fit that type is InvalidArgument here, naming the workflow and the field, and
        nothing is sent (docs/workflows.md#contexts).

        ``request_id`` makes the start idempotent: a start repeating a request id (a retry after
        an error or a lost answer) returns the instance the first one started.

        Flow control (docs/flow-control.md): ``priority`` (-100..100, higher is claimed first,
        aged by waiting time; sub-workflows inherit it); ``start_at`` (a timezone-aware datetime)
        or ``start_delay`` (a timedelta or seconds) makes the instance SCHEDULED until then;
        ``dedup_key``: while another instance of the workflow holding the key is live (or
        finished less than its ``dedup_window`` ago), this start returns that instance with
        ``deduplicated`` True instead of starting one. ``timeout`` (a timedelta or seconds)
        is this instance's time limit, instead of the workflow's ``Workflow.define(timeout=)``
        (0: none; docs/semantics.md#workflow-time-limits).

        Concurrent starts of one client (its threads, or its tasks) share one call while an earlier
        one is in flight, each answered with its own instance or error; a lone start is sent at
        once (docs/performance.md#starts-that-batch-themselves).

        A start with a ``request_id`` is asked again while the server is away (UNAVAILABLE:
        stopping, restarting; or no answer within 30 s) for up to ``patience`` seconds (30), since
        repeating it cannot start a second instance; one without fails with Unavailable at once,
        for it may or may not have happened, unless the server said nothing of it was applied
        (``Unavailable.not_applied``: its database was away), when it is asked again too. A
        client that has never reached its server asks for 3 s at most (a wrong target).
        """
        options = messages.start_options(priority, start_at, start_delay, dedup_key, dedup_window, timeout)
        request = messages.start_request(workflow, context, version, correlation_id, request_id, options)
        self._link.check()  # as reading self.stub does for _call: a start may go on the stream
        with tracing.span("wiggle.start", tracing.CLIENT, attributes={"wiggle.workflow": request.workflow}):
            if tracing.active():  # the call carries this start's own trace context: sent alone
                send = self._start_one
            else:
                send = self._starts.start
            clock = core.WaitClock(self.patience, from_first_failure=True) if request_id else None
            try:
                reply = self._again_while_away(lambda: send(request), clock)
            except InvalidArgument as exc:  # over the server's payload limit: named as the caller did
                raise messages.renamed(exc, "context_json", "context") from None
            self._reached = True  # the unary calls mark it in _call; a streamed start here
            return instance_from_pb(reply)

    def _start_one(self, request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        reply: pb.InstanceInfo = self._call(self.stub.StartInstance, request)
        return reply

    def _start_alone(self, request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        # a start the batcher sends by itself: on the stream as a batch of one, else StartInstance
        reply = self._stream.call(pb.StartInstancesRequest(starts=[request]), core.CALL_TIMEOUT)
        if reply is not None:
            return only_start(reply)
        return self._start_one(request)

    def _start_coalesced(self, request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        streamed = self._stream.call(request, core.CALL_TIMEOUT)
        if streamed is not None:
            return streamed
        reply: pb.StartInstancesResponse = self._call(self.stub.StartInstances, request)
        return reply

    def start_many(
        self,
        workflow: str | Blueprint[Any],
        contexts: Iterable[Any],
        *,
        version: str = "",
        correlation_id: str = "",
        request_id: str = "",
        chunk_size: int = messages.START_CHUNK,
        priority: int = 0,
        start_at: datetime | None = None,
        start_delay: timedelta | float | None = None,
        timeout: timedelta | float | None = None,
    ) -> builtins.list[str]:
        """Start one instance per context (dicts or msgspec.Structs); the instance ids, in order.

        Sent in StartInstances calls of ``chunk_size`` contexts, each committed in large batches.
        With ``request_id``, instance i is started with request id ``"<request_id>:<i>"``: repeating
        the call after an error starts only what the first call did not. ``priority``,
        ``start_at`` and ``start_delay`` apply to every instance, as in ``start`` (a delay
        counts from each call's arrival), and ``timeout``.

        Given a Blueprint typed with a msgspec.Struct, each context is checked as its call is
        built (as ``start`` checks one): one that does not fit is InvalidArgument naming its
        index, and neither its call nor any later one is sent (the error says which went before).
        """
        options = messages.start_options(priority, start_at, start_delay, timeout=timeout)
        chunks = messages.StartChunks(
            workflow, contexts, version, correlation_id, request_id, chunk_size, options
        )
        ids: builtins.list[str] = []
        request = chunks.next_request()
        while request is not None:
            try:
                reply = self._start_chunk(request)
            except InvalidArgument as exc:  # named as the caller's context i, not the wire field
                raise messages.chunk_refused(exc, request.first_index, request.request_id) from None
            ids.extend(reply.instance_ids)
            chunks.pin(reply.version)
            request = chunks.next_request()
        return ids

    def _start_chunk(self, request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        # a chunk of start_many: asked again while the server is away when its starts have request
        # ids (repeating them starts nothing twice), as a lone start is
        clock = core.WaitClock(self.patience, from_first_failure=True) if request.request_id else None
        reply: pb.StartInstancesResponse = self._again_while_away(
            lambda: self._call(self.stub.StartInstances, request), clock
        )
        return reply

    def _again_while_away(self, send: Callable[[], Any], clock: core.WaitClock | None) -> Any:
        """``send()``'s answer; after Unavailable (the server stopping, restarting, unreachable,
        or no answer within the deadline: ``core.no_answer``) asked again, with ``clock``'s
        pauses, until its time is up (None, or a client with no ``patience``: not asked again). A
        client that has never reached its server asks for ``core.FIRST_CONTACT`` seconds at most:
        a wrong target is a mistake to report, not a restart to wait out; its Unavailable says
        where it looked, for every call (``core.never_reached``)."""
        unreached: core.WaitClock | None = None
        told: Unavailable | None = None  # the tries' most telling failure (core.more_telling)
        only_unapplied = clock is None  # a call not safe to repeat: asked again only while not applied
        while True:
            try:
                return send()
            except Unavailable as exc:
                if not self._reached and (exc.not_applied or str(exc).startswith(STOPPING)):
                    self._reached = True  # the server itself answered: the target is right
                if not self._reached:
                    told = core.more_telling(told, exc)
                    unreached = unreached or core.WaitClock(core.FIRST_CONTACT)
                    if unreached.expired():
                        raise core.never_reached(told, self.target, self.credentials) from None
                if only_unapplied:
                    # nothing of it was applied (the server's database was away): made again, on
                    # the next server of several (docs/failover.md#a-server-without-its-database);
                    # a try that may have been applied is not
                    if not exc.not_applied:
                        clock = None
                    elif clock is None:
                        clock = core.WaitClock(self.patience, from_first_failure=True)
                pause = clock.again_in() if clock is not None and self.patience > 0 else None
                if pause is None:
                    if self._reached:
                        raise exc from None
                    raise core.never_reached(told or exc, self.target, self.credentials) from None
                core.pause(pause)

    def get(self, instance_id: str | InstanceInfo) -> InstanceInfo:
        """The instance as it is now (``instance_id``: its id, or an InstanceInfo of it)."""
        request = pb.GetInstanceRequest(instance_id=messages.instance_id_of(instance_id))
        return instance_from_pb(self._call_again(self.stub.GetInstance, request))

    def wait(
        self,
        instance_id: str | InstanceInfo,
        timeout: timedelta | float = 60.0,
    ) -> InstanceInfo:
        """Wait until the instance finishes (any status) or ``timeout`` (a timedelta or seconds)
        passes; returns the snapshot.

        A server that is away (stopping, restarting: UNAVAILABLE) is asked again, with pauses, until
        ``timeout``; Unavailable is raised only if it is still away then, or after 3 s by a client
        that has never reached its server (a wrong target), or at once by a client made with
        ``patience=0`` (an argument of the client, not of ``wait``). A negative ``timeout`` is
        InvalidArgument."""
        iid = messages.instance_id_of(instance_id)
        clock = core.WaitClock(core.wait_seconds(timeout))
        while True:
            reply = self._again_while_away(
                lambda: self._call(self.stub.GetInstance, *clock.request(iid)), clock
            )
            info = instance_from_pb(reply)
            if clock.done(info):
                return info

    def result(
        self,
        instance_id: str | InstanceInfo,
        timeout: timedelta | float = 60.0,
    ) -> InstanceInfo:
        """Wait for completion (``timeout``: a timedelta or seconds); raise WorkflowFailed if it
        FAILED or was CANCELLED, TimeoutError if still running (a negative ``timeout`` is
        InvalidArgument)."""
        seconds = core.wait_seconds(timeout)
        return core.check_result(self.wait(instance_id, seconds), seconds)

    def list(
        self,
        *,
        workflow: str | Blueprint[Any] = "",
        status: str = "",
        correlation_id: str = "",
        created_after: int | datetime = 0,
        created_before: int | datetime = 0,
        page_size: int = 50,
        page_token: str = "",
        node: str = "",
        text: str = "",
        context: Mapping[str, str | int | float | bool] | None = None,
        top_level: bool = False,
        parent_id: str = "",
        schedule_id: str = "",
        with_context: bool = True,
    ) -> tuple[builtins.list[InstanceInfo], str]:
        """One page of instances (newest first) and the next page token ('' on the last page).

        ``workflow``: a name or a Blueprint; ``created_after`` / ``created_before``: a
        timezone-aware datetime, or epoch milliseconds (an int; 0: no bound); ``page_size`` up to
        the server's limit. An argument of another type (a naive datetime too) is InvalidArgument
        naming it.

        Search (docs/dashboard.md#searching): ``node``, instances with an active token there;
        ``text``, the status reason or error contains it (any case); ``context``, field -> value:
        each top-level context field's value, as text, equals the value (a str as it is, a number
        or a bool as its JSON text: ``{"vip": True}`` matches ``true``; None, a list or a dict is
        InvalidArgument: an object or an array field matches its compact JSON text, given as a
        str); ``top_level``, no
        sub-workflow children. ``parent_id``: only that instance's sub-workflow children;
        ``schedule_id``: only the instances that schedule started.

        ``with_context=False`` leaves every instance's context out (``info.context`` is ``{}``):
        the server does not read it, so a page over large contexts costs little
        (docs/performance.md#listing-instances). Pass it whenever the contexts are not read.
        """
        search = {
            "node": node,
            "text": text,
            "context": context,
            "top_level": top_level,
            "parent_id": parent_id,
            "schedule_id": schedule_id,
            "omit_context": not with_context,
        }
        request = messages.list_request(
            workflow, status, correlation_id, created_after, created_before, page_size, page_token, search
        )
        reply = self._call_again(self.stub.ListInstances, request)
        return [instance_from_pb(i) for i in reply.instances], reply.next_page_token

    def cancel(
        self,
        instance_id: str | InstanceInfo,
        reason: str = "cancelled",
    ) -> tuple[InstanceInfo, bool]:
        """Cancel a running instance; (snapshot, changed). A finished instance is left as it is.

        ``changed`` is False when the instance had finished already — also when this call was
        asked again across a server restart and its first try had cancelled it."""
        request = pb.CancelInstanceRequest(
            instance_id=messages.instance_id_of(instance_id), reason=messages.text_of(reason, "reason")
        )
        reply = self._call_again(self.stub.CancelInstance, request)
        return instance_from_pb(reply.instance), reply.changed

    def complete_user_task(
        self,
        instance_id: str | InstanceInfo,
        name: str,
        data: Any = None,
    ) -> InstanceInfo:
        """Complete the user task ``name``; ``data`` (a dict) merges into the context."""
        request = messages.complete_user_task_request(instance_id, name, data)
        try:
            return instance_from_pb(self._call_once(self.stub.CompleteUserTask, request))
        except InvalidArgument as exc:  # over the server's payload limit: named as the caller did
            raise messages.renamed(exc, "payload_json", "data") from None

    def signal(
        self,
        instance_id: str | InstanceInfo,
        name: str,
        data: Any = None,
        signal_id: str | None = None,
        *,
        sender: str = "",
    ) -> SignalResult:
        """Send the signal ``name`` with ``data`` (a dict) to an instance (docs/semantics.md#signal).

        A token waiting for it takes it now (DELIVERED); otherwise it is buffered on the instance
        until one does (BUFFERED). With ``signal_id``, a second send of the same id changes
        nothing (DUPLICATE), and the send rides through a server restart (a first try that was
        taken makes the repeat DUPLICATE). A finished instance is FailedPrecondition; a name no wait of the
        instance's version listens for is NotFound.
        """
        request = messages.signal_request(instance_id, name, data, signal_id, sender)
        try:
            if signal_id:  # a second send of the id changes nothing: asked again while the server is away
                return signal_result_from_pb(self._call_again(self.stub.SignalInstance, request))
            return signal_result_from_pb(self._call_once(self.stub.SignalInstance, request))
        except InvalidArgument as exc:  # over the server's payload limit: named as the caller did
            raise messages.renamed(exc, "data_json", "data") from None

    def retry(
        self,
        instance_id: str | InstanceInfo,
        *,
        from_node: str = "",
        context: Any = None,
        requested_by: str | None = None,
    ) -> InstanceInfo:
        """Resume a FAILED instance (docs/semantics.md#resuming-a-failed-instance).

        By default the steps that failed run again with a fresh attempt budget and everything
        completed is kept; ``from_node`` restarts from that node instead, and ``context`` (a dict)
        replaces the context. ``requested_by`` (default ``user@host``) is recorded in the history.
        Any other status is FailedPrecondition, and nothing changes.
        """
        request = messages.retry_request(instance_id, from_node, context, requested_by)
        try:
            return instance_from_pb(self._call_once(self.stub.RetryInstance, request))
        except InvalidArgument as exc:  # over the server's payload limit: named as the caller did
            raise messages.renamed(exc, "context_json", "context") from None

    def history(self, instance_id: str | InstanceInfo) -> builtins.list[HistoryEntry]:
        """Every step attempt and event of the instance, in order."""
        request = pb.GetHistoryRequest(instance_id=messages.instance_id_of(instance_id))
        reply = self._call_again(self.stub.GetHistory, request)
        return [history_from_pb(e) for e in reply.entries]

    # ------------------------------------------------------------------ schedules

    def create_schedule(
        self,
        schedule_id: str,
        workflow: str | Blueprint[Any],
        context: Any = None,
        *,
        every: timedelta | float | None = None,
        cron: str = "",
        timezone: str | None = None,
        version: str = "",
        overlap: str = "SKIP",
        catchup: str = "NONE",
        catchup_limit: int = 0,
        paused: bool = False,
        priority: int = 0,
    ) -> ScheduleInfo:
        """Start an instance of ``workflow`` every ``every`` (a timedelta or seconds) or on a 5-field ``cron``.

        ``timezone`` is an IANA zone for cron (unset: UTC); an interval has none, and one given
        with ``every`` is refused; ``overlap`` is SKIP, BUFFER_ONE or ALLOW (what a
        tick does while the previous instance runs); ``catchup`` is NONE, LAST or ALL (up to
        ``catchup_limit``): which ticks missed while every server was down still start one.
        ``priority`` is given to every instance it starts (docs/flow-control.md#priorities).
        """
        request = messages.schedule_spec(
            schedule_id,
            workflow,
            context,
            every,
            cron,
            timezone,
            version,
            overlap,
            catchup,
            catchup_limit,
            paused,
            priority,
        )
        try:
            return schedule_from_pb(self._call_once(self.stub.CreateSchedule, request))
        except InvalidArgument as exc:  # over the server's payload limit: named as the caller did
            raise messages.renamed(exc, "context_json", "context") from None

    def update_schedule(
        self,
        schedule_id: str,
        workflow: str | Blueprint[Any],
        context: Any = None,
        *,
        every: timedelta | float | None = None,
        cron: str = "",
        timezone: str | None = None,
        version: str = "",
        overlap: str = "SKIP",
        catchup: str = "NONE",
        catchup_limit: int = 0,
        priority: int = 0,
    ) -> ScheduleInfo:
        """Replace a schedule's spec (same arguments as create_schedule); ticks restart from now."""
        request = messages.schedule_spec(
            schedule_id,
            workflow,
            context,
            every,
            cron,
            timezone,
            version,
            overlap,
            catchup,
            catchup_limit,
            False,
            priority,
        )
        try:
            return schedule_from_pb(self._call_again(self.stub.UpdateSchedule, request))
        except InvalidArgument as exc:  # over the server's payload limit: named as the caller did
            raise messages.renamed(exc, "context_json", "context") from None

    def get_schedule(self, schedule_id: str) -> ScheduleInfo:
        """A schedule with its next fire times."""
        request = pb.ScheduleRequest(schedule_id=messages.text_of(schedule_id, "schedule_id"))
        return schedule_from_pb(self._call_again(self.stub.GetSchedule, request))

    def list_schedules(self, workflow: str | Blueprint[Any] = "") -> builtins.list[ScheduleInfo]:
        """Every schedule (of ``workflow``: a name or a Blueprint), by id, with their next fire times."""
        name = messages.workflow_name(workflow, "list_schedules()", "workflow")
        reply = self._call_again(self.stub.ListSchedules, pb.ListSchedulesRequest(workflow=name))
        return [schedule_from_pb(s) for s in reply.schedules]

    def pause_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Stop a schedule firing (its ticks meanwhile are dropped)."""
        request = pb.ScheduleRequest(schedule_id=messages.text_of(schedule_id, "schedule_id"))
        return schedule_from_pb(self._call_again(self.stub.PauseSchedule, request))

    def resume_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Fire a paused schedule again, from its next tick after now."""
        request = pb.ScheduleRequest(schedule_id=messages.text_of(schedule_id, "schedule_id"))
        return schedule_from_pb(self._call_again(self.stub.ResumeSchedule, request))

    def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule (the instances it started stay)."""
        self._call_once(
            self.stub.DeleteSchedule,
            pb.ScheduleRequest(schedule_id=messages.text_of(schedule_id, "schedule_id")),
        )

    def trigger_schedule(self, schedule_id: str) -> InstanceInfo:
        """Start one instance of a schedule now (whatever its overlap policy, even paused)."""
        request = pb.ScheduleRequest(schedule_id=messages.text_of(schedule_id, "schedule_id"))
        return instance_from_pb(self._call_once(self.stub.TriggerSchedule, request))

    def queues(self) -> builtins.list[QueueInfo]:
        """Every queue with ready or leased steps, and the workers polling it (the answering node)."""
        reply = self._call_again(self.stub.ListQueues, pb.ListQueuesRequest())
        return [queue_from_pb(q) for q in reply.queues]

    def set_queue_limit(
        self,
        queue: str,
        *,
        max_running: int = 0,
        rate_max: int = 0,
        rate_period: timedelta | float | None = None,
    ) -> None:
        """Limit ``queue``, cluster-wide and durably (docs/flow-control.md#queue-limits): at most
        ``max_running`` of its steps running at once, at most ``rate_max`` claims per
        ``rate_period`` (a timedelta or seconds). 0 (and no period) means no limit; with no limit
        at all, the queue's limits are removed. ``queues()`` shows them."""
        request = messages.queue_limit_request(
            messages.text_of(queue, "queue"), max_running, rate_max, rate_period
        )
        self._call_again(self.stub.SetQueueLimit, request)
