"""SERVER style: run one claimed step, report it with CompleteTask or FailTask.

Used for every SERVER-mode activation, for LOCAL_* ones the worker may not drive locally (a
blueprint version it does not have exactly, a JOIN, ``use_local_modes=False``), and by a local run
that learns the server has no AdvanceRun (it reports the one step it ran this way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import msgspec

from .. import _tracing as tracing
from .._model import Handback
from .._rpc import wiggle_pb2 as pb
from ..errors import InvalidArgument
from ..workflow import HandlerKind
from .handlers import HandlerCaller
from .heartbeats import Heartbeats
from .loaded import LoadedBlueprint
from .outcomes import Context, Failure, Outcome, encoded_result
from .reporter import Reporter

__all__ = [
    "run_server_step",
    "report_outcome",
    "report_failure",
    "release_step",
    "decode_context",
    "hand_back_cut",
]

_decode = msgspec.json.Decoder().decode

log = logging.getLogger("wiggle.worker")

#: How long a step or a local run cut by the worker's drain tries to hand back (``_hand_back_cut``,
#: LocalRun._hand_back_cut); past it, or failing, the lease covers it.
CUT_HANDBACK_SECONDS = 5.0


def decode_context(act: pb.TaskActivation) -> Context:
    """The activation's context (the server sends JSON objects only; empty means {})."""
    if not act.context_json:
        return {}
    context: Context = _decode(act.context_json)
    return context


async def run_server_step(
    caller: HandlerCaller,
    reporter: Reporter,
    heartbeats: Heartbeats,
    loaded: LoadedBlueprint,
    act: pb.TaskActivation,
    next_queues: Sequence[str] = (),
    closing: Callable[[], bool] | None = None,
) -> pb.TaskActivation | None:
    """Run the activation's step, heartbeating while it runs, and report its outcome. With
    ``next_queues`` (the worker's) a CompleteTask asks for the instance's next step: the
    activation the server leased with the report, if any (docs/semantics.md#chained-steps).

    A step cut while its handler runs because the worker is closing (``closing()`` true: its
    drain ran out) is handed back, READY again at once without an attempt spent, rather than
    left to its lease ("lease expired (worker unreachable)" in its history, and a wait)."""
    context = decode_context(act)
    heartbeats.watch(act)
    try:
        if caller.runs_inline(loaded, act.node_id):  # a quick sync handler: right here, no coroutine
            outcome = caller.run_sync(loaded, act, act.node_id, context, act.attempt, True)
        else:
            outcome = await caller.run(loaded, act, act.node_id, context, act.attempt)
    except asyncio.CancelledError:
        if closing is not None and closing():
            await _hand_back_cut(reporter, act)
        raise
    finally:
        heartbeats.unwatch(act)
    return await report_outcome(
        reporter, act, loaded.blueprint.handlers[act.node_id][0], outcome, next_queues
    )


async def _hand_back_cut(reporter: Reporter, act: pb.TaskActivation) -> None:
    """Hand back the step of ``act``, cut by the worker's drain (``run_server_step``)."""
    request = pb.AdvanceRunRequest(task_id=act.task_id, lease_owner=act.lease_owner, final=True)
    if not await hand_back_cut(reporter, request):
        log.info("the cut step of %s was not handed back; its lease expires", act.instance_id)


async def hand_back_cut(reporter: Reporter, request: pb.AdvanceRunRequest, started: bool = True) -> bool:
    """Send ``request``, the handback of a step the worker's drain cut, within
    ``CUT_HANDBACK_SECONDS``; False if it was not taken (the lease then covers the step).

    Its reason is CUT, for which the server records a RELEASED entry in the step's history (the
    step had started here and runs again). A server older than that reason refuses it
    (InvalidArgument, nothing applied): the handback goes again as SHUTDOWN, which it knows. A
    step that had not started (``started`` False) goes back as SHUTDOWN: nothing to explain."""
    for reason in (Handback.CUT, Handback.SHUTDOWN) if started else (Handback.SHUTDOWN,):
        request.handback_reason = reason.value
        try:
            await asyncio.wait_for(reporter.advance(request), CUT_HANDBACK_SECONDS)
        except InvalidArgument as exc:
            if reason is Handback.CUT and "handback_reason" in str(exc):
                continue
            log.info("a cut step's handback was refused: %s", exc)
            return False
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 (the lease covers it)
            log.info("a cut step's handback failed: %s", exc)
            return False
        return True
    return False


def patience(act: pb.TaskActivation) -> float:
    """Seconds to keep retrying a report of ``act`` while its server is away: its lease's length
    (wiggle/_worker/reporter.py), 0 from a server that does not say it (the tries alone)."""
    return act.lease_millis / 1000


def report_outcome(
    reporter: Reporter,
    act: pb.TaskActivation,
    kind: str,
    outcome: Outcome,
    next_queues: Sequence[str] = (),
) -> Coroutine[Any, Any, pb.TaskActivation | None]:
    """CompleteTask with the outcome, or FailTask if it is a Failure (in a span when tracing);
    the next step the server leased with a CompleteTask that asked for one (``next_queues``)."""
    if tracing.active():
        return _traced_report(reporter, act, kind, outcome, next_queues)
    return _report(reporter, act, kind, outcome, next_queues)


async def _traced_report(
    reporter: Reporter, act: pb.TaskActivation, kind: str, outcome: Outcome, next_queues: Sequence[str]
) -> pb.TaskActivation | None:
    name = "FailTask" if isinstance(outcome, Failure) else "CompleteTask"
    with tracing.span(f"wiggle.report {name}", tracing.CLIENT, act.traceparent):
        return await _report(reporter, act, kind, outcome, next_queues)


async def _report(
    reporter: Reporter, act: pb.TaskActivation, kind: str, outcome: Outcome, next_queues: Sequence[str]
) -> pb.TaskActivation | None:
    if isinstance(outcome, Failure):
        await report_failure(reporter, act, outcome)
        return None
    request = pb.CompleteTaskRequest(
        task_id=act.task_id, lease_owner=act.lease_owner, next_queues=next_queues
    )
    if kind == HandlerKind.PREDICATE:
        request.predicate_value = bool(outcome)
    elif outcome is not None:
        encoded = encoded_result(act.node_id, outcome)
        if isinstance(encoded, Failure):  # a result JSON cannot hold: the step fails for good, named
            await report_failure(reporter, act, encoded)
            return None
        request.context_json = encoded
    result = await reporter.complete(request, patience(act))
    if result is None or not result.HasField("next_task"):
        return None
    return result.next_task


async def report_failure(reporter: Reporter, act: pb.TaskActivation, failure: Failure) -> None:
    """FailTask: the server retries the step (if retryable and its policy allows) or fails it."""
    await reporter.fail(
        pb.FailTaskRequest(
            task_id=act.task_id,
            lease_owner=act.lease_owner,
            message=failure.message,
            retryable=failure.retryable,
            traceback=failure.traceback,
        ),
        patience(act),
    )


async def release_step(reporter: Reporter, act: pb.TaskActivation, message: str) -> None:
    """FailTask with ``release``: this worker cannot run the step; another worker gets it, same attempt."""
    await reporter.fail(
        pb.FailTaskRequest(
            task_id=act.task_id, lease_owner=act.lease_owner, message=message, retryable=True, release=True
        ),
        patience(act),
    )
