"""``Branch``: a sequence of nodes (a workflow's body, a choose arm, a fork branch, a loop body)
and the checks of what each of its methods is given, raised where the workflow is defined.

The public names are wiggle/workflow.py's; ``Workflow`` (the whole graph, its settings and its
``build``) is a Branch defined there, and the compiler that turns the items into nodes is
wiggle/_workflow_compile.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

from ._model import Limit, RateLimit, RetryPolicy, validate_name
from ._model_validate import check_rate_period_in_millis
from ._workflow_compile import Blueprint
from ._workflow_items import (
    ChooseItem,
    EndItem,
    ForEachItem,
    ForkItem,
    GateItem,
    Item,
    LoopItem,
    SignalItem,
    SleepItem,
    StepItem,
    StepLimits,
    SubWorkflowItem,
    UserTaskItem,
    duration_millis,
    optional_millis,
)
from .errors import InvalidArgument

if TYPE_CHECKING:
    from .workflow import Workflow

Duration = timedelta | float  # a time limit: a timedelta or seconds

C = TypeVar("C")
B = TypeVar("B", bound="Branch[Any]")
BranchSpec = Union["Branch[Any]", Callable[["Branch[Any]"], "Branch[Any] | None"], None]


def _node_name(fn: Callable[..., Any], name: str | None) -> str:
    """The name of the node ``fn`` runs: ``name`` if given, else the function's own name. A lambda
    has none to give ("<lambda>" is refused as a name, as any other with characters outside the
    set), nor has a callable object or a functools.partial: InvalidArgument asking for ``name=``."""
    if name is not None:
        return name
    own = getattr(fn, "__name__", None)
    if own == "<lambda>":
        raise InvalidArgument(
            "a lambda has no name to give its node: pass one with name=, e.g. "
            '.step(lambda ctx: ctx, name="tidy")'
        )
    if not isinstance(own, str):
        raise InvalidArgument(f"handler {fn!r} has no __name__ to name its node: pass one with name=")
    return own


def _check_not_generator(fn: Callable[..., Any], what: str) -> None:
    """InvalidArgument if ``fn`` is a generator function (``def`` or ``async def`` with ``yield``):
    calling it gives a generator, not a result, so every attempt of its step would fail
    ("returned async_generator": wiggle/_worker/outcomes.py). ``what`` names the node."""
    if inspect.isasyncgenfunction(fn):
        kind = "an async generator function"
    elif inspect.isgeneratorfunction(fn):
        kind = "a generator function"
    else:
        return
    raise InvalidArgument(
        f"{what}: its handler {getattr(fn, '__qualname__', fn)} is {kind} (it has `yield`), so a call "
        "gives a generator, not a result; a handler returns its result (`return ctx`, or None)"
    )


def _check_one_argument(fn: Callable[..., Any], node_id: str) -> None:
    """InvalidArgument unless ``fn`` can be called with one argument, the context: a handler that
    cannot would fail every attempt of its step with a TypeError. Callables whose signature Python
    cannot tell (some builtins) are let through."""
    _check_not_generator(fn, f"step {node_id!r}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise InvalidArgument(
            f"step {node_id!r}: its handler {getattr(fn, '__qualname__', fn)}{signature} cannot be called "
            "with one argument; a step's handler takes the context and returns it (or None)"
        ) from None


class Branch(Generic[C]):
    """A sequence of nodes: the body of a workflow, a choose arm, a fork branch or a loop body."""

    def __init__(self, root: Workflow[Any] | None = None) -> None:
        self._items: list[Item] = []
        self._root: Workflow[Any] = root if root is not None else self  # type: ignore[assignment]

    # -------------------------------------------------------------- building

    def _add(self, item: Item) -> None:
        if self._items and isinstance(self._items[-1], EndItem):
            raise InvalidArgument("nothing can follow .end() in the same branch")
        self._items.append(item)

    def _sub(self, spec: BranchSpec, what: str) -> Branch[Any]:
        if spec is None:
            return Branch(self._root)
        if isinstance(spec, Branch):
            return spec
        if callable(spec):
            b: Branch[Any] = Branch(self._root)
            out = spec(b)
            return out if isinstance(out, Branch) else b
        raise InvalidArgument(
            f"{what} must be a Branch or a function building one, got {type(spec).__name__}"
        )

    def _step(
        self,
        cls: type[StepItem],
        fn: Callable[..., Any],
        name: str | None,
        queue: str | None,
        retry: RetryPolicy | None,
        timeout: Duration | None = None,
        heartbeat_timeout: Duration | None = None,
        schedule_to_start: Duration | None = None,
        concurrency: Limit | None = None,
        rate_limit: RateLimit | None = None,
    ) -> StepItem:
        if not callable(fn):
            raise InvalidArgument(f"a step handler must be callable, got {type(fn).__name__}")
        node_id = self._root._node(name, _node_name(fn, name), "step name")
        _check_one_argument(fn, node_id)
        if queue is not None:
            validate_name(queue, "queue")
        limits = StepLimits(
            optional_millis(timeout, f"step {node_id!r} timeout") or self._root._step_timeout,
            optional_millis(heartbeat_timeout, f"step {node_id!r} heartbeat_timeout"),
            optional_millis(schedule_to_start, f"step {node_id!r} schedule_to_start"),
        )
        if concurrency is not None and not isinstance(concurrency, Limit):
            raise InvalidArgument(
                f"step {node_id!r} concurrency must be a wiggle.Limit, got {type(concurrency).__name__}"
            )
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise InvalidArgument(
                f"step {node_id!r} rate_limit must be a wiggle.RateLimit, got {type(rate_limit).__name__}"
            )
        if rate_limit is not None:
            check_rate_period_in_millis(rate_limit, f"step {node_id!r}")
        return cls(fn, node_id, queue, _retry_policy(retry), limits, concurrency, rate_limit)

    def step(
        self: B,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        heartbeat_timeout: Duration | None = None,
        schedule_to_start: Duration | None = None,
        concurrency: Limit | None = None,
        rate_limit: RateLimit | None = None,
    ) -> B:
        """A TASK: ``fn(ctx) -> ctx`` (or ``async def``); its result becomes the context (None: unchanged).

        ``queue`` defaults to the workflow's name. ``retry`` defaults to the workflow's policy.
        Raise ``wiggle.PermanentError`` to fail without retrying.

        Time limits (a timedelta or seconds; none by default; docs/semantics.md#step-time-limits):
        ``timeout`` bounds one attempt from its claim to its report (default: the workflow's
        ``step_timeout``); ``heartbeat_timeout`` gives an attempt up when its worker stops
        heartbeating for that long; ``schedule_to_start`` fails the step when no worker claims it
        that long after it became due. A timed-out attempt is a retryable failure (the retry
        policy decides); a schedule-to-start timeout is final.

        ``concurrency=Limit(key="customer_id", max=1)``: at most ``max`` attempts of this step run
        at once per value of that context key, cluster-wide; the others wait READY and go as
        attempts end (docs/flow-control.md#concurrency-limits).

        ``rate_limit=RateLimit(key="merchant_id", max=50, period=1.0)``: at most ``max`` claims of
        this step per ``period`` seconds per value of that context key, cluster-wide; the others
        wait READY for their key's next moment (docs/flow-control.md#per-key-rate-limits).
        """
        self._add(
            self._step(
                StepItem,
                fn,
                name,
                queue,
                retry,
                timeout,
                heartbeat_timeout,
                schedule_to_start,
                concurrency,
                rate_limit,
            )
        )
        return self

    def gate(
        self: B,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        heartbeat_timeout: Duration | None = None,
        schedule_to_start: Duration | None = None,
        concurrency: Limit | None = None,
        rate_limit: RateLimit | None = None,
    ) -> B:
        """A PREDICATE that ends the instance early: False ends it COMPLETED with reason ``gated:<name>``.

        The time limits, ``concurrency`` and ``rate_limit`` are those of ``step``."""
        self._add(
            self._step(
                GateItem,
                fn,
                name,
                queue,
                retry,
                timeout,
                heartbeat_timeout,
                schedule_to_start,
                concurrency,
                rate_limit,
            )
        )
        return self

    def checkpoint(self: B) -> B:
        """Commit right after the previous step, even in LOCAL_ASYNC (part of the version hash).

        Put it after a step whose side effect must not be repeated by a LOCAL_ASYNC replay.
        """
        last = self._items[-1] if self._items else None
        step = last.step if isinstance(last, (ChooseItem, LoopItem)) else last
        if not isinstance(step, StepItem):
            raise InvalidArgument(".checkpoint() must directly follow a step or gate")
        step.checkpoint = True
        return self

    def choose(
        self: B,
        predicate: Callable[..., Any],
        *,
        if_true: BranchSpec = None,
        if_false: BranchSpec = None,
        name: str | None = None,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> B:
        """Run ``predicate(ctx) -> bool`` and follow ``if_true`` or ``if_false``; both arms rejoin after."""
        step = self._step(StepItem, predicate, name, queue, retry)
        self._add(ChooseItem(step, self._sub(if_true, "if_true"), self._sub(if_false, "if_false")))
        return self

    def loop(
        self: B,
        predicate: Callable[..., Any],
        body: BranchSpec,
        *,
        name: str | None = None,
        queue: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> B:
        """While ``predicate(ctx)`` is True run ``body``, then go on. The runaway guard
        (WIGGLE_MAX_INSTANCE_STEPS) fails an instance whose loop never exits."""
        step = self._step(StepItem, predicate, name, queue, retry)
        self._add(LoopItem(step, self._sub(body, "body")))
        return self

    def sleep(self: B, name: str, duration: timedelta | float) -> B:
        """A server-side timer: no worker is held; continues after ``duration`` (never early).

        ``duration`` (a timedelta or seconds) is at most 10 years (``MAX_DURATION_MILLIS``).
        """
        self._add(
            SleepItem(
                self._root._node(name, name, "sleep name"),
                duration_millis(duration, "sleep duration"),
            )
        )
        return self

    def fork(self: B, *branches: BranchSpec, name: str | None = None) -> B:
        """Run the branches in parallel, each on its own copy of the context, then ``.join()``."""
        if not branches:
            raise InvalidArgument("fork() needs at least one branch")
        fork_name = self._root._node(name, "fork", "fork name")
        built = [self._sub(b, f"fork branch {i}") for i, b in enumerate(branches)]
        self._add(ForkItem(fork_name, built))
        return self

    def join(
        self: B,
        combine: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str | None = None,
    ) -> B:
        """Close the preceding fork. Branch changes are folded in branch order; when two branches
        changed the same key, ``combine(base, [branch contexts]) -> ctx`` decides, or without one the
        instance fails naming the key."""
        last = self._items[-1] if self._items else None
        if not isinstance(last, ForkItem) or last.join_name:
            raise InvalidArgument(".join() must directly follow .fork(...)")
        last.join_name = self._root._node(name, last.name.replace("fork", "join", 1) or "join", "join name")
        if combine is not None:
            _check_not_generator(combine, f"join {last.join_name!r}")
        last.combine = combine
        last.combine_queue = queue
        return self

    def user_task(
        self: B,
        name: str,
        *,
        timeout: timedelta | float | None = None,
        on_timeout: BranchSpec = None,
    ) -> B:
        """Park until a person or system completes task ``name`` (its payload merges into the context).

        With ``timeout`` and no ``on_timeout``, a missed deadline fails the instance with
        ``"user task '<name>' timed out"``; with ``on_timeout`` the instance runs that branch instead.
        ``timeout`` (a timedelta or seconds) is at most 10 years (``MAX_DURATION_MILLIS``).
        """
        ms = duration_millis(timeout, "timeout") if timeout is not None else 0
        task_name = validate_name(name, "user task name")
        if task_name in self._root._names:
            raise InvalidArgument(f"user task name {name!r} is already used by another node")
        self._root._names.add(task_name)
        self._add(
            UserTaskItem(
                task_name, ms, self._sub(on_timeout, "on_timeout") if on_timeout is not None else None
            )
        )
        return self

    def wait_signal(
        self: B,
        signal: str,
        *,
        name: str | None = None,
        timeout: timedelta | float | None = None,
        on_timeout: BranchSpec = None,
        key: str | None = None,
    ) -> B:
        """Park until the signal ``signal`` is sent to the instance (``client.signal(id, signal, data)``).

        The signal's data (a JSON object) merges into the context, or goes under ``key`` when
        given. A signal sent before the instance gets here is buffered and consumed on arrival.
        With ``timeout`` and no ``on_timeout`` a missed deadline fails the instance; with
        ``on_timeout`` it runs that branch instead. The node is named ``name`` (default: the
        signal name) — docs/semantics.md#signal.
        """
        signal_name = validate_name(signal, "signal name")
        if key is not None:
            validate_name(key, "signal key")
        ms = duration_millis(timeout, "timeout") if timeout is not None else 0
        node_id = self._root._node(name, signal_name, "signal node name")
        branch = self._sub(on_timeout, "on_timeout") if on_timeout is not None else None
        self._add(SignalItem(node_id, signal_name, ms, branch, key))
        return self

    def for_each(
        self: B,
        items_key: str,
        body: BranchSpec,
        *,
        name: str | None = None,
        item_key: str = "item",
        index_key: str = "index",
        output_key: str = "result",
        result_key: str = "results",
        concurrency: int = 0,
    ) -> B:
        """Run ``body`` once per element of the list at ``items_key``, then join (docs/semantics.md#for-each).

        Each branch starts from the context without the list, plus ``item_key`` (the element) and
        ``index_key`` (its index); its result is the value it leaves at ``output_key``. After the
        last branch the context is the fork-time one plus ``result_key``: the results in input
        order. At most ``concurrency`` branches run at once (0: DEFAULT_FOR_EACH_CONCURRENCY); an
        empty list goes straight on with ``[]``. A value that is not a list fails the instance (or,
        at the start, refuses the start).
        """
        fe_name = self._root._node(name, "for_each", "for_each name")
        join_name = self._root._unique(f"{fe_name}.join")
        keys = {
            "item_key": item_key if item_key != "item" else None,
            "index_key": index_key if index_key != "index" else None,
            "output_key": output_key if output_key != "result" else None,
            "result_key": result_key if result_key != "results" else None,
            "concurrency": concurrency,
        }
        self._add(ForEachItem(fe_name, join_name, items_key, self._sub(body, "for_each body"), keys))
        return self

    def sub_workflow(
        self: B,
        name: str,
        workflow: str | Blueprint[Any],
        *,
        version: str | None = None,
        input_keys: list[str] | None = None,
        result_key: str | None = None,
        on_error: BranchSpec = None,
        retry: RetryPolicy | None = None,
    ) -> B:
        """Start an instance of ``workflow`` and wait for it, holding no worker (docs/semantics.md#sub-workflows).

        The child starts with the parent's context (only ``input_keys`` if given), at ``version``
        if pinned (else the latest when it starts). Its final context is merged into the parent's,
        or put under ``result_key``. A failed child fails this step: ``retry`` (or the workflow's
        policy) starts a new child; when the attempts are spent the instance fails, or continues
        at ``on_error`` if given.
        """
        keys = _input_keys(input_keys)
        _retry_policy(retry)
        node_name = self._root._node(name, name, "sub_workflow name")
        target = workflow.name if isinstance(workflow, Blueprint) else workflow
        spec: dict[str, Any] = {
            "workflow": target,
            "version": version,
            "input_keys": keys,
            "result_key": result_key,
            "retry": retry,
        }
        self._add(
            SubWorkflowItem(
                node_name, spec, self._sub(on_error, "on_error") if on_error is not None else None
            )
        )
        return self

    def end(self: B, reason: str | None = None, *, success: bool = True) -> B:
        """End the instance here: COMPLETED (or FAILED with ``success=False``) with ``reason``."""
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgument(f"end reason must be a string, got {type(reason).__name__}")
        self._add(EndItem(self._root._unique("end"), reason, success))
        return self


def _retry_policy(retry: object) -> RetryPolicy | None:
    """``retry`` as given (a RetryPolicy, or None for the default), else InvalidArgument."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidArgument(f"retry must be a RetryPolicy, got {type(retry).__name__}")
    return retry


def _input_keys(input_keys: object) -> tuple[str, ...] | None:
    """``sub_workflow``'s ``input_keys`` as a tuple of key names (None: all keys), else InvalidArgument.

    A string is refused rather than split into its characters; a set too (no order: the version
    hash would vary from run to run).
    """
    if input_keys is None:
        return None
    if isinstance(input_keys, str):
        raise InvalidArgument("input_keys must be a list of key names, not a string")
    if not isinstance(input_keys, (list, tuple)):
        raise InvalidArgument(f"input_keys must be a list of key names, got {type(input_keys).__name__}")
    for key in input_keys:
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"input_keys must name context keys (non-empty strings), got {key!r}")
    return tuple(input_keys)
