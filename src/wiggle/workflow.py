"""The workflow DSL: describe a graph of Python steps, compile it to a definition + handler table.

::

    wf = (
        Workflow.define("orders", Order)          # Order: a msgspec.Struct, or dict
        .execution(ExecutionMode.LOCAL_SYNC)
        .step(validate)
        .gate(in_stock)                           # False: COMPLETED with reason "gated:in_stock"
        .step(charge, queue="payments", retry=RetryPolicy.exponential(5, 0.1))
        .checkpoint()
        .choose(is_big, if_true=lambda b: b.step(review), if_false=lambda b: b.step(auto_ok))
        .fork(lambda b: b.step(pack), lambda b: b.step(invoice)).join()
        .sleep("cool-off", timedelta(minutes=5))
        .user_task("approval", timeout=timedelta(days=1), on_timeout=lambda b: b.step(escalate))
    )
    blueprint = wf.build()

Durability, by execution mode (read this before choosing one):

- SERVER and LOCAL_SYNC commit every step before the next one runs: after an unclean worker
  death (kill -9, OOM, lost host) at most the one step in flight runs again.
- LOCAL_ASYNC commits a whole local run at once, at its handback (or every
  ``local_batch_size`` steps, or at a ``.checkpoint()``): an unclean worker death re-runs every
  step of the run since its last flush. A graceful ``Worker.close()`` flushes first and loses
  nothing.
- Execution is at-least-once in every mode. A step with a side effect that must not repeat
  (charging a card, sending an email) belongs in a SERVER or LOCAL_SYNC workflow, behind an
  idempotency key, or directly before a ``.checkpoint()`` so it is committed on its own.
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

import msgspec

from ._model import (
    MAX_COUNT,
    ExecutionMode,
    Limit,
    Node,
    NodeKind,
    RetryPolicy,
    WorkflowDefinition,
    validate_name,
)
from ._model_validate import check_workflow_limit
from ._workflow_branch import Branch, Duration
from ._workflow_compile import Blueprint, Compiler, HandlerKind
from ._workflow_items import optional_millis
from .errors import InvalidArgument

__all__ = ["Workflow", "Branch", "Blueprint", "HandlerKind"]

C = TypeVar("C")
S = TypeVar("S", bound=msgspec.Struct)
W = TypeVar("W", bound="Workflow[Any]")


def _is_context_type(context_type: object) -> bool:
    """Whether a workflow's context may be of ``context_type``: ``dict`` or a msgspec.Struct
    subclass (what a worker decodes a context into: wiggle/_worker/loaded.py)."""
    return context_type is dict or (
        isinstance(context_type, type) and issubclass(context_type, msgspec.Struct)
    )


class Workflow(Branch[C]):
    """A workflow under construction. Start with ``Workflow.define(name, ContextType)``."""

    def __init__(self, name: str, context_type: type[C]) -> None:
        self._names: set[str] = {"end"}  # the implicit END at the end of the main line
        super().__init__(self)
        self.name = validate_name(name, "workflow name")
        self.context_type = context_type
        self._mode = ExecutionMode.DEFAULT
        self._max_local_steps = 0
        self._default_retry: RetryPolicy | None = None
        self._counter = 0
        self._timeout = 0  # the workflow's own time limit (ms, 0: none)
        self._step_timeout = 0  # the steps' default start-to-close limit (ms, 0: none)
        self._concurrency: Limit | None = None  # live instances per key (docs/flow-control.md)

    # What the type checker sees says what ``define`` accepts: no type or ``dict`` is a
    # Workflow[dict[str, Any]] (``bp = Workflow.define("x").step(f).build()`` needs no annotation
    # under mypy --strict), a msgspec.Struct subclass S a Workflow[S]; anything else (a TypedDict, a
    # dataclass), refused when the workflow is defined, is an error before it runs.
    @overload
    @classmethod
    def define(
        cls,
        name: str,
        context_type: type[dict[Any, Any]] = ...,
        *,
        timeout: Duration | None = None,
        step_timeout: Duration | None = None,
        concurrency: Limit | None = None,
    ) -> Workflow[dict[str, Any]]: ...

    @overload
    @classmethod
    def define(
        cls,
        name: str,
        context_type: type[S],
        *,
        timeout: Duration | None = None,
        step_timeout: Duration | None = None,
        concurrency: Limit | None = None,
    ) -> Workflow[S]: ...

    @classmethod
    def define(
        cls,
        name: str,
        context_type: type[Any] = dict,
        *,
        timeout: Duration | None = None,
        step_timeout: Duration | None = None,
        concurrency: Limit | None = None,
    ) -> Workflow[Any]:
        """Begin a workflow whose context is ``context_type``: a ``msgspec.Struct`` subclass or ``dict``.

        ``timeout`` (a timedelta or seconds): an instance still running that long after its start
        fails with reason "workflow timed out" wherever it waits; its children are cancelled (a
        start may set its own). ``step_timeout``: the start-to-close limit of every step that does
        not set its own ``timeout``. Both are part of the version (docs/semantics.md#time-limits).
        ``concurrency=Limit(key="account_id", max=1, strategy="queue")``: at most ``max`` live
        instances per value of the context key; a start over it waits SCHEDULED for a slot
        (``queue``), is cancelled (``cancel_newest``) or cancels the oldest live ones
        (``cancel_oldest``); part of the version (docs/flow-control.md#workflow-concurrency).
        """
        if not _is_context_type(context_type):
            raise InvalidArgument(
                f"context type must be dict or a msgspec.Struct subclass, got {context_type!r}"
            )
        if concurrency is not None and not isinstance(concurrency, Limit):
            raise InvalidArgument(
                f"workflow {name!r} concurrency must be a wiggle.Limit, got {type(concurrency).__name__}"
            )
        if concurrency is not None:
            check_workflow_limit(name, concurrency)  # refused here, naming the workflow
        workflow = cls(name, context_type)
        workflow._concurrency = concurrency
        workflow._timeout = optional_millis(timeout, f"workflow {name!r} timeout")
        workflow._step_timeout = optional_millis(step_timeout, f"workflow {name!r} step_timeout")
        return workflow

    def _node(self, given: str | None, default: str, what: str) -> str:
        """A node's name: ``given`` when the caller named it (refused if another node has it: a
        second node of that name would be renamed behind the caller's back, and ``mock_step``
        or ``wait_for`` by that name would find the first only), else ``default``, made unique."""
        if given is None:
            return self._unique(validate_name(default, what))
        name = validate_name(given, what)
        if name in self._names:
            raise InvalidArgument(
                f"{what} {name!r} is already used by another node of workflow {self.name!r}: node "
                f"names are unique (a name left to its default is numbered instead: {name}.2)"
            )
        self._names.add(name)
        return name

    def _unique(self, name: str) -> str:
        candidate = name
        n = 1
        while candidate in self._names:
            n += 1
            candidate = f"{name}.{n}"
        self._names.add(candidate)
        return candidate

    def execution(self: W, mode: ExecutionMode | str, *, max_steps: int = 0) -> W:
        """Choose the execution mode (part of the version); ``max_steps`` (0 to 2**31-1) caps one local run.

        SERVER and LOCAL_SYNC re-run at most one step after an unclean worker death; LOCAL_ASYNC
        re-runs the unflushed local run, so its steps must be idempotent (see the module docs).
        """
        try:
            # any case, as `wiggle demo --mode` takes it: "local_sync" is LOCAL_SYNC
            self._mode = ExecutionMode(
                mode.value
                if isinstance(mode, ExecutionMode)
                else mode.upper()
                if isinstance(mode, str)
                else mode
            )
        except ValueError:
            raise InvalidArgument(
                f"execution mode {mode!r} is not SERVER, LOCAL_SYNC, LOCAL_ASYNC or DEFAULT"
            ) from None
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise InvalidArgument(f"max_steps must be an integer, got {type(max_steps).__name__}")
        if max_steps < 0:
            raise InvalidArgument("max_steps must be >= 0")
        if max_steps > MAX_COUNT:
            raise InvalidArgument(f"max_steps is {max_steps}; the limit is {MAX_COUNT}")
        self._max_local_steps = max_steps
        return self

    def retry(self: W, policy: RetryPolicy) -> W:
        """The default retry policy of this workflow's steps (else 3 attempts, 1 s then 2 s apart)."""
        if not isinstance(policy, RetryPolicy):  # None too: the default is a policy, not "no policy"
            raise InvalidArgument(f"retry must be a RetryPolicy, got {type(policy).__name__}")
        self._default_retry = policy
        return self

    def build(self) -> Blueprint[C]:
        """Compile to a validated definition and its handler table."""
        compiler = Compiler(self.name, lambda branch: branch._items)
        first = compiler.sequence(self, "end")
        if first == "end" or any("end" in (n.next, n.alt_next) for n in compiler.nodes):
            compiler.nodes.insert(0, Node(id="end", kind=NodeKind.END))
        definition = WorkflowDefinition(
            name=self.name,
            start_node=first,
            nodes=tuple(reversed(compiler.nodes)),
            execution_mode=self._mode,
            checkpoints=tuple(sorted(compiler.checkpoints)),
            max_local_steps=self._max_local_steps,
            default_retry=self._default_retry,
            timeout_millis=self._timeout,
            concurrency=self._concurrency,
        ).validate()
        return Blueprint(definition, compiler.handlers, self.context_type)
