"""The graph model: nodes, retry policies, definitions, their canonical JSON form and version hash.

A definition is data, not code: the server keeps it, the engine walks it, and its version is the
SHA-256 of its canonical JSON form, so re-registering the same graph is a no-op and any change
(the execution mode and checkpoints included) mints a new version.
"""

from __future__ import annotations

import enum
import hashlib
import math
import random
import re

import msgspec

from ._limits import (
    DEFAULT_FOR_EACH_CONCURRENCY,
    MAX_BACKOFF_MULTIPLIER,
    MAX_COUNT,
    MAX_DURATION_MILLIS,
    check_count,
    check_millis,
    seconds_to_millis,
)
from .errors import InvalidArgument

__all__ = [
    "ExecutionMode",
    "NodeKind",
    "JoinMerge",
    "RetryPolicy",
    "Limit",
    "LIMIT_STRATEGIES",
    "RateLimit",
    "Node",
    "WorkflowDefinition",
    "Handback",
    "validate_name",
    "NAME_PATTERN",
    "DEFAULT_RETRY",
    "definition_from_json",
    "MAX_DURATION_MILLIS",
    "MAX_COUNT",
    "MAX_BACKOFF_MULTIPLIER",
    "seconds_to_millis",
    "DEFAULT_FOR_EACH_CONCURRENCY",
]


class ExecutionMode(str, enum.Enum):
    """Who drives a workflow's worker steps (docs/semantics.md#execution-modes).

    SERVER: the server, one node per claim; each step is committed before the next runs.
    LOCAL_SYNC: the worker chains same-queue steps locally and commits each one (AdvanceRun per
    step) before running the next: as durable as SERVER, fewer round trips.
    LOCAL_ASYNC: the worker chains locally and commits the whole run at handback. An unclean
    worker death re-runs the unflushed run: its steps must be idempotent.
    DEFAULT: resolved by the server's WIGGLE_EXECUTION_MODE (itself SERVER unless set).
    """

    SERVER = "SERVER"
    LOCAL_SYNC = "LOCAL_SYNC"
    LOCAL_ASYNC = "LOCAL_ASYNC"
    DEFAULT = "DEFAULT"


class NodeKind(str, enum.Enum):
    """The node kinds of a workflow graph."""

    TASK = "TASK"
    PREDICATE = "PREDICATE"
    SLEEP = "SLEEP"
    FORK = "FORK"
    JOIN = "JOIN"
    USER_TASK = "USER_TASK"
    END = "END"
    SIGNAL = "SIGNAL"  # wait for a named signal (docs/semantics.md#signal)
    SUB_WORKFLOW = "SUB_WORKFLOW"  # start a child instance and wait for it (upstream SUB_WORKFLOW)
    FOR_EACH = "FOR_EACH"  # one branch per element of a list (upstream DYN_FORK)


class JoinMerge(str, enum.Enum):
    """How a join folds its branches' writes (docs/semantics.md#fork-and-join).

    STRICT: two branches changing the same key is a conflict (a combine step resolves it, else the
    instance fails). LAST_WRITE_WINS: branches are applied in the order they reached the join, a
    later write to a key replacing an earlier one; a FOR_EACH then merges each branch's writes
    into the context instead of collecting results. Definitions registered through the upstream
    Wiggle protocol use it (wiggle/_upstream/definitions.py), because that is upstream's rule.
    """

    STRICT = "STRICT"
    LAST_WRITE_WINS = "LAST_WRITE_WINS"


class Handback(str, enum.Enum):
    """Why a worker's local run stops and hands control back to the server (docs/semantics.md#handbacks)."""

    SLEEP = "SLEEP"
    FORK = "FORK"
    JOIN = "JOIN"
    USER_TASK = "USER_TASK"
    OTHER_QUEUE = "OTHER_QUEUE"
    TERMINAL = "TERMINAL"
    RETRY = "RETRY"  # the step failed and needs a delayed retry (or failed for good)
    LEASE_BUDGET = "LEASE_BUDGET"
    MAX_STEPS = "MAX_STEPS"
    NOT_RUNNING = "NOT_RUNNING"  # the server says the instance is no longer RUNNING
    SHUTDOWN = "SHUTDOWN"  # Worker.close(): drain and hand back
    CUT = "CUT"  # the worker's drain ran out during a step: it runs again (a RELEASED history entry)
    SIGNAL = "SIGNAL"
    SUB_WORKFLOW = "SUB_WORKFLOW"
    FOR_EACH = "FOR_EACH"


#: Names of workflows, nodes, queues, user tasks and correlation ids.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-/@]{0,199}")
MAX_NAME_LENGTH = 200


def validate_name(value: object, what: str) -> str:
    """Return ``value`` if it is a valid name, else raise InvalidArgument naming ``what``."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must not be empty")
    if value != value.strip():
        raise InvalidArgument(f"{what} {value!r} has surrounding whitespace")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidArgument(f"{what} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}")
    if not NAME_PATTERN.fullmatch(value):
        raise InvalidArgument(
            f"{what} {value!r} has characters outside [A-Za-z0-9_.:-/@] (or starts with one of .:-/@)"
        )
    return value


def _check_attempts(attempts: int, helper: str) -> None:
    """``RetryPolicy.fixed`` and ``exponential`` count attempts: 0 would mean no limit (the field's
    meaning), which a reader of ``fixed(0, ...)`` takes for "no retry" (an outside trial's step
    ran 4,638 times in a minute). Refused, naming both ways."""
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise InvalidArgument(f"RetryPolicy.{helper}: attempts must be an int, got {type(attempts).__name__}")
    if attempts < 1:
        raise InvalidArgument(
            f"RetryPolicy.{helper}: attempts is {attempts}; it counts every attempt, the first "
            "included, so it must be 1 or more (RetryPolicy.none() for one attempt and no retry, "
            "RetryPolicy.forever() to retry without limit)"
        )


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How often a failing worker step is tried, and how long to wait in between.

    Backoff before attempt n+1 (after n failures): ``initial * multiplier**(n-1)`` capped at
    ``max_backoff``, times a uniform factor in ``[1-jitter, 1+jitter]``. ``max_attempts == 0``
    means no limit (``RetryPolicy.forever``).

    Limits (checked by the helpers, by ``build()`` and at register): ``max_attempts`` in [0, 2**31-1]; both backoffs in
    [0, MAX_DURATION_MILLIS] (10 years); ``multiplier`` finite, in [1, 1000]; ``jitter`` in [0, 1).
    """

    max_attempts: int = 3
    initial_backoff_millis: int = 1000
    multiplier: float = 2.0
    max_backoff_millis: int = 60_000
    jitter: float = 0.0

    @staticmethod
    def none() -> RetryPolicy:
        """One attempt, no retry."""
        return RetryPolicy(max_attempts=1, initial_backoff_millis=0, multiplier=1.0, max_backoff_millis=0)

    @staticmethod
    def fixed(attempts: int, delay_seconds: float) -> RetryPolicy:
        """Up to ``attempts`` attempts (1 or more), ``delay_seconds`` apart."""
        _check_attempts(attempts, "fixed")
        ms = seconds_to_millis(delay_seconds, "retry delay")
        return RetryPolicy(
            max_attempts=attempts, initial_backoff_millis=ms, multiplier=1.0, max_backoff_millis=ms
        )

    @staticmethod
    def _backoffs(helper: str, initial_seconds: float, max_seconds: float) -> tuple[int, int]:
        """The two delays in ms; InvalidArgument if the first is over the cap, which would make
        every delay the cap (``exponential(3, 10, max_seconds=1)``: arguments swapped, likely)."""
        initial = seconds_to_millis(initial_seconds, "retry initial delay")
        cap = seconds_to_millis(max_seconds, "retry maximum delay")
        if initial > cap:
            raise InvalidArgument(
                f"RetryPolicy.{helper}: the first delay ({initial_seconds:g} s) is longer than "
                f"max_seconds ({max_seconds:g} s), so every delay would be {max_seconds:g} s; give "
                "max_seconds at least the first delay (were the two swapped?)"
            )
        return initial, cap

    @staticmethod
    def exponential(
        attempts: int,
        initial_seconds: float,
        multiplier: float = 2.0,
        max_seconds: float = 60.0,
        jitter: float = 0.0,
    ) -> RetryPolicy:
        """Up to ``attempts`` attempts (1 or more); the delay starts at ``initial_seconds`` and grows."""
        _check_attempts(attempts, "exponential")
        initial, cap = RetryPolicy._backoffs("exponential", initial_seconds, max_seconds)
        policy = RetryPolicy(
            max_attempts=attempts,
            initial_backoff_millis=initial,
            multiplier=multiplier,
            max_backoff_millis=cap,
            jitter=jitter,
        )
        # the multiplier and jitter refused here, as the attempts and delays are, not first by
        # build() or the server (an outside trial took exponential(3, 1, jitter=2) for valid)
        policy.check("RetryPolicy.exponential")
        return policy

    @staticmethod
    def forever(initial_seconds: float = 1.0, max_seconds: float = 300.0) -> RetryPolicy:
        """Retry without limit (exponential backoff): only for steps that must eventually pass."""
        initial, cap = RetryPolicy._backoffs("forever", initial_seconds, max_seconds)
        return RetryPolicy(
            max_attempts=0, initial_backoff_millis=initial, multiplier=2.0, max_backoff_millis=cap
        )

    def allows_another(self, failures: int) -> bool:
        """True if a step that has failed ``failures`` times may run again."""
        return self.max_attempts == 0 or failures < self.max_attempts

    def backoff_millis(self, failures: int, rng: random.Random | None = None) -> int:
        """The delay before the next attempt after ``failures`` (>= 1) failures."""
        if self.initial_backoff_millis <= 0:
            return 0
        exponent = max(failures - 1, 0)
        try:
            delay = self.initial_backoff_millis * (self.multiplier**exponent)
        except OverflowError:
            delay = float(self.max_backoff_millis)
        delay = min(delay, float(self.max_backoff_millis))
        if self.jitter > 0:
            delay *= (rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return max(int(delay), 0)

    def check(self, where: str) -> None:
        """Raise InvalidArgument naming the field and its limit if one is out of range."""
        check_count(self.max_attempts, "retry max_attempts", where, "0 = forever")
        for field in ("initial_backoff_millis", "max_backoff_millis"):
            value = getattr(self, field)
            if isinstance(value, int) and value < 0:
                raise InvalidArgument(f"{where}: retry backoffs must be >= 0 milliseconds")
            check_millis(value, f"retry {field}", where)
        for field in ("multiplier", "jitter"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise InvalidArgument(f"{where}: retry {field} must be a number, got {value!r}")
        if self.multiplier < 1.0:
            raise InvalidArgument(f"{where}: retry multiplier must be >= 1.0, got {self.multiplier}")
        if self.multiplier > MAX_BACKOFF_MULTIPLIER:
            raise InvalidArgument(
                f"{where}: retry multiplier is {self.multiplier}; the limit is {MAX_BACKOFF_MULTIPLIER}"
            )
        if not 0.0 <= self.jitter < 1.0:
            raise InvalidArgument(f"{where}: retry jitter must be in [0, 1), got {self.jitter}")


#: The workflow default when neither the node nor the workflow names a policy: 3 attempts,
#: 1 s then 2 s apart. Finite on purpose: an infinite default hides bugs.
DEFAULT_RETRY = RetryPolicy()


#: What a workflow-level limit does with a start over it (docs/flow-control.md#workflow-concurrency):
#: the start waits SCHEDULED for a slot, is cancelled, or cancels the oldest live instances.
LIMIT_STRATEGIES = ("queue", "cancel_newest", "cancel_oldest")


class Limit(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A concurrency limit per value of the context key ``key``, cluster-wide.

    On a worker step (docs/flow-control.md#concurrency-limits): at most ``max`` attempts of the
    step run at once. The key's value is read from the step's context when the step becomes
    READY; a missing key counts as the value ``null``. Steps over the limit wait READY (queue
    behind) and are claimed as attempts of their key end. ``group`` names a limit several steps
    share (of any workflow); unset, each step has its own (``<workflow>/<step>``).

    On a workflow (``Workflow.define(..., concurrency=)``, docs/flow-control.md#workflow-concurrency):
    at most ``max`` live instances of the workflow per value of the key, read from the start's
    context; ``strategy`` (LIMIT_STRATEGIES) says what a start over the limit does. A step's
    limit only queues (its strategy stays "queue") and a workflow's takes no ``group``.
    Part of the definition (and its version); the defaults are omitted from its JSON form.
    """

    key: str
    max: int = 1
    group: str | None = None
    strategy: str = "queue"

    def scope(self, workflow: str, node_id: str) -> str:
        """The name the running attempts are counted under, before the key's value."""
        return self.group if self.group is not None else f"{workflow}/{node_id}"


class RateLimit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """A worker step's rate limit (docs/flow-control.md#per-key-rate-limits): at most ``max``
    claims of the step per ``period`` seconds, cluster-wide, per value of the context key ``key``.

    The key's value is read from the step's context when the step becomes READY (a missing key
    counts as ``null``); without a key the step (or its group) has one budget for all. Claims of
    one key are spaced at least ``period / max`` apart; a step over its rate waits READY, it never
    fails for it. ``group`` names a budget several steps share (of any workflow); unset, each step
    has its own (``<workflow>/<step>``). Part of the definition (and its version).
    """

    key: str | None = None
    max: int
    period: float = 1.0
    group: str | None = None

    def scope(self, workflow: str, node_id: str) -> str:
        """The name the claims are counted under, before the key's value."""
        return self.group if self.group is not None else f"{workflow}/{node_id}"

    @property
    def period_millis(self) -> int:
        """The period in milliseconds (the unit the stores count in)."""
        return round(self.period * 1000)


class Node(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One node of a workflow graph. Which fields matter depends on ``kind``.

    TASK: ``queue``, ``next``, ``retry``. PREDICATE: ``queue``, ``next`` (true), ``alt_next``
    (false), ``retry``. Both take time limits (0: none; docs/semantics.md#step-time-limits):
    ``timeout_millis`` (start to close: one attempt, from its claim to its report),
    ``heartbeat_timeout_millis`` (the longest silence between heartbeats) and
    ``schedule_to_start_millis`` (from becoming due to being claimed). SLEEP: ``sleep_millis``, ``next``. FORK: ``branches`` (first node of each
    branch), ``join``. JOIN: ``fork``, ``combine`` (a combine handler runs on conflicts; it is a
    worker step on ``queue``), ``next``. USER_TASK: ``timeout_millis`` (0: none), ``alt_next``
    (where a timeout continues; unset: the instance fails), ``next``. END: ``success``, ``reason``.
    SIGNAL: ``signal`` (the name waited for), ``timeout_millis`` (0: none), ``alt_next`` (the
    timeout path; unset: the instance fails), ``result_key`` (unset: the data merges into the
    context), ``next``.

    SUB_WORKFLOW: ``workflow`` (the child's name), ``version`` (pinned; unset: the latest at the
    child's start), ``input_keys`` (the parent keys the child starts with; unset: all),
    ``result_key`` (where the child's final context goes; unset: merged in), ``next``,
    ``alt_next`` (where a failed child continues; unset: the step fails), ``retry``.
    FOR_EACH: ``items_key`` (the list), ``branches`` (the body's first node), ``join``,
    ``item_key`` / ``index_key`` (default "item" / "index"), ``output_key`` (a branch's result;
    default "result"), ``result_key`` (where the join puts the results; default "results"),
    ``concurrency`` (0: DEFAULT_FOR_EACH_CONCURRENCY). docs/semantics.md#sub-workflows and
    #for-each state the rules.

    ``sleep_millis`` and ``timeout_millis`` are bounded by MAX_DURATION_MILLIS (10 years).
    """

    id: str
    kind: NodeKind
    next: str | None = None
    alt_next: str | None = None
    queue: str | None = None
    retry: RetryPolicy | None = None
    sleep_millis: int = 0
    branches: tuple[str, ...] = ()
    join: str | None = None
    fork: str | None = None
    combine: bool = False
    timeout_millis: int = 0
    success: bool = True
    reason: str | None = None
    signal: str | None = None  # SIGNAL: the signal name waited for
    # SIGNAL: the context key the signal's data goes to; SUB_WORKFLOW: the key the child's final
    # context goes to (None: merged into the context)
    result_key: str | None = None
    workflow: str | None = None
    version: str | None = None
    input_keys: tuple[str, ...] | None = None
    items_key: str | None = None
    item_key: str | None = None
    index_key: str | None = None
    output_key: str | None = None
    concurrency: int = 0
    heartbeat_timeout_millis: int = 0  # TASK, PREDICATE: given up after this much silence
    schedule_to_start_millis: int = 0  # TASK, PREDICATE: failed if not claimed this long after due
    limit: Limit | None = None  # TASK, PREDICATE: a concurrency limit per context key (Limit)
    rate: RateLimit | None = None  # TASK, PREDICATE: a rate limit per context key (RateLimit)

    @property
    def is_worker_step(self) -> bool:
        """TASK and PREDICATE nodes run on workers."""
        return self.kind is NodeKind.TASK or self.kind is NodeKind.PREDICATE


class WorkflowDefinition(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A workflow graph. Immutable; its version is the hash of its canonical JSON form.

    ``max_local_steps`` is in [0, MAX_COUNT] (2**31 - 1); every duration and count of its nodes
    and retry policies is bounded too (see Node and RetryPolicy): ``validate`` refuses a
    definition naming the field and the limit.
    """

    name: str
    start_node: str
    nodes: tuple[Node, ...]
    execution_mode: ExecutionMode = ExecutionMode.DEFAULT
    checkpoints: tuple[str, ...] = ()
    max_local_steps: int = 0  # cap on one local run's length (0: the server's default)
    default_retry: RetryPolicy | None = None
    join_merge: JoinMerge = JoinMerge.STRICT
    # the workflow's own time limit: an instance still running this long after its start fails
    # (0: none; a start may set its own; docs/semantics.md#workflow-time-limits)
    timeout_millis: int = 0
    # at most ``max`` live instances per value of a context key (docs/flow-control.md#workflow-concurrency)
    concurrency: Limit | None = None

    def to_json(self) -> bytes:
        """The canonical JSON form: keys sorted, defaults omitted, checkpoints sorted."""
        canonical = msgspec.structs.replace(self, checkpoints=tuple(sorted(set(self.checkpoints))))
        return msgspec.json.encode(canonical, order="sorted")

    def content_version(self) -> str:
        """The version: the first 16 hex digits of the SHA-256 of the canonical JSON form."""
        return hashlib.sha256(self.to_json()).hexdigest()[:16]

    def node_map(self) -> dict[str, Node]:
        """Nodes by id."""
        return {n.id: n for n in self.nodes}

    def retry_for(self, node: Node) -> RetryPolicy:
        """The retry policy in force for ``node``."""
        return node.retry or self.default_retry or DEFAULT_RETRY

    def validate(self) -> WorkflowDefinition:
        """Raise InvalidArgument naming the first problem found; return self if the graph is sound."""
        # The rules live in their own module; imported here because it imports these types.
        from ._model_validate import validate_definition

        validate_definition(self)
        return self


_definition_decoder = msgspec.json.Decoder(WorkflowDefinition)


def definition_from_json(data: bytes) -> WorkflowDefinition:
    """Decode and validate a definition; InvalidArgument names what is wrong."""
    try:
        definition = _definition_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"definition_json is not a valid workflow definition: {exc}") from None
    return definition.validate()
