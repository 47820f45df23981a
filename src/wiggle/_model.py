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
from collections.abc import Iterable

import msgspec

from .errors import InvalidArgument

__all__ = [
    "ExecutionMode",
    "NodeKind",
    "RetryPolicy",
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

#: Branches of a FOR_EACH running at once when the node sets no ``concurrency``: a large list is
#: started a slice at a time, never one token per element in one transaction.
DEFAULT_FOR_EACH_CONCURRENCY = 100

#: The longest duration a definition may hold (sleeps, user-task timeouts, retry backoffs):
#: ten years of 365.25 days, in milliseconds. Far beyond any real wait, and far inside the
#: 64-bit millisecond timestamps the stores keep (a sleep of 2**63-1 ms used to be accepted and
#: then overflowed the store on the next start).
MAX_DURATION_MILLIS = 315_576_000_000

#: The largest count a definition may hold (retry attempts, max_local_steps): 2**31 - 1.
MAX_COUNT = 2**31 - 1

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


def _check_millis(value: object, field: str, where: str) -> None:
    """A duration field in milliseconds: an int in [0, MAX_DURATION_MILLIS]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{where}: {field} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{where}: {field} must be >= 0, got {value}")
    if value > MAX_DURATION_MILLIS:
        raise InvalidArgument(
            f"{where}: {field} is {value}; the limit is {MAX_DURATION_MILLIS} milliseconds (10 years)"
        )


def _check_count(value: object, field: str, where: str, what_zero: str) -> None:
    """A count field: an int in [0, MAX_COUNT]; ``what_zero`` says what 0 means."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{where}: {field} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{where}: {field} must be >= 0 ({what_zero}), got {value}")
    if value > MAX_COUNT:
        raise InvalidArgument(f"{where}: {field} is {value}; the limit is {MAX_COUNT}")


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


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How often a failing worker step is tried, and how long to wait in between.

    Backoff before attempt n+1 (after n failures): ``initial * multiplier**(n-1)`` capped at
    ``max_backoff``, times a uniform factor in ``[1-jitter, 1+jitter]``. ``max_attempts == 0``
    means no limit (``RetryPolicy.forever``).

    Limits (checked at register): ``max_attempts`` in [0, 2**31-1]; both backoffs in
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
        """Up to ``attempts`` attempts, ``delay_seconds`` apart."""
        ms = seconds_to_millis(delay_seconds, "retry delay")
        return RetryPolicy(
            max_attempts=attempts, initial_backoff_millis=ms, multiplier=1.0, max_backoff_millis=ms
        )

    @staticmethod
    def exponential(
        attempts: int,
        initial_seconds: float,
        multiplier: float = 2.0,
        max_seconds: float = 60.0,
        jitter: float = 0.0,
    ) -> RetryPolicy:
        """Up to ``attempts`` attempts; the delay starts at ``initial_seconds`` and grows."""
        return RetryPolicy(
            max_attempts=attempts,
            initial_backoff_millis=seconds_to_millis(initial_seconds, "retry initial delay"),
            multiplier=multiplier,
            max_backoff_millis=seconds_to_millis(max_seconds, "retry maximum delay"),
            jitter=jitter,
        )

    @staticmethod
    def forever(initial_seconds: float = 1.0, max_seconds: float = 300.0) -> RetryPolicy:
        """Retry without limit (exponential backoff): only for steps that must eventually pass."""
        return RetryPolicy(
            max_attempts=0,
            initial_backoff_millis=seconds_to_millis(initial_seconds, "retry initial delay"),
            multiplier=2.0,
            max_backoff_millis=seconds_to_millis(max_seconds, "retry maximum delay"),
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
        _check_count(self.max_attempts, "retry max_attempts", where, "0 = forever")
        for field in ("initial_backoff_millis", "max_backoff_millis"):
            value = getattr(self, field)
            if isinstance(value, int) and value < 0:
                raise InvalidArgument(f"{where}: retry backoffs must be >= 0 milliseconds")
            _check_millis(value, f"retry {field}", where)
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


class Node(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One node of a workflow graph. Which fields matter depends on ``kind``.

    TASK: ``queue``, ``next``, ``retry``. PREDICATE: ``queue``, ``next`` (true), ``alt_next``
    (false), ``retry``. SLEEP: ``sleep_millis``, ``next``. FORK: ``branches`` (first node of each
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
        validate_name(self.name, "workflow name")
        if not self.nodes:
            raise InvalidArgument(f"workflow {self.name!r} has no nodes")
        nodes: dict[str, Node] = {}
        for node in self.nodes:
            validate_name(node.id, "node id")
            if node.id in nodes:
                raise InvalidArgument(f"workflow {self.name!r}: duplicate node id {node.id!r}")
            nodes[node.id] = node
        if self.start_node not in nodes:
            raise InvalidArgument(f"workflow {self.name!r}: start node {self.start_node!r} does not exist")
        _check_count(
            self.max_local_steps, "max_local_steps", f"workflow {self.name!r}", "0 = the server's cap"
        )
        if self.default_retry is not None:
            self.default_retry.check(f"workflow {self.name!r}")

        def edge(node: Node, field: str, target: str | None, required: bool) -> None:
            if target is None:
                if required:
                    raise InvalidArgument(f"node {node.id!r} ({node.kind.value}) needs a {field!r} edge")
                return
            if target not in nodes:
                raise InvalidArgument(
                    f"node {node.id!r}: {field!r} points to {target!r}, which does not exist"
                )

        for node in self.nodes:
            kind = node.kind
            if node.is_worker_step:
                if node.queue is not None:
                    validate_name(node.queue, f"node {node.id!r} queue")
                edge(node, "next", node.next, True)
                edge(node, "alt_next", node.alt_next, kind is NodeKind.PREDICATE)
                if node.retry is not None:
                    node.retry.check(f"node {node.id!r}")
            elif kind is NodeKind.SLEEP:
                _check_millis(node.sleep_millis, "sleep_millis", f"sleep {node.id!r}")
                edge(node, "next", node.next, True)
            elif kind is NodeKind.SUB_WORKFLOW:
                validate_name(node.workflow, f"sub-workflow {node.id!r} workflow")
                if node.version is not None:
                    validate_name(node.version, f"sub-workflow {node.id!r} version")
                for key in node.input_keys or ():
                    _check_key(key, "input_keys", node)
                if node.result_key is not None:
                    _check_key(node.result_key, "result_key", node)
                edge(node, "next", node.next, True)
                edge(node, "alt_next", node.alt_next, False)
                if node.retry is not None:
                    node.retry.check(f"node {node.id!r}")
            elif kind is NodeKind.FOR_EACH:
                if node.items_key is None:
                    raise InvalidArgument(f"for_each {node.id!r} needs an items_key (the list to fan out)")
                for field in ("items_key", "item_key", "index_key", "output_key", "result_key"):
                    if getattr(node, field) is not None:
                        _check_key(getattr(node, field), field, node)
                _check_count(node.concurrency, "concurrency", f"for_each {node.id!r}", "0 = the default")
                if len(node.branches) != 1:
                    raise InvalidArgument(
                        f"for_each {node.id!r} needs exactly one body (branches), got {len(node.branches)}"
                    )
                edge(node, "branches", node.branches[0], True)
                if node.join is None:
                    raise InvalidArgument(f"for_each {node.id!r} has no join")
                edge(node, "join", node.join, True)
                j = nodes[node.join]
                if j.kind is not NodeKind.JOIN or j.fork != node.id:
                    raise InvalidArgument(
                        f"for_each {node.id!r}: its join {node.join!r} is not a JOIN of this for_each"
                    )
                if j.combine:
                    raise InvalidArgument(f"join {j.id!r} of for_each {node.id!r} cannot have a combine step")
            elif kind is NodeKind.FORK:
                if not node.branches:
                    raise InvalidArgument(f"fork {node.id!r} has no branches")
                for b in node.branches:
                    edge(node, "branches", b, True)
                if node.join is None:
                    raise InvalidArgument(f"fork {node.id!r} has no join")
                edge(node, "join", node.join, True)
                j = nodes[node.join]
                if j.kind is not NodeKind.JOIN or j.fork != node.id:
                    raise InvalidArgument(
                        f"fork {node.id!r}: its join {node.join!r} is not a JOIN of this fork"
                    )
            elif kind is NodeKind.JOIN:
                if node.fork is None or node.fork not in nodes or nodes[node.fork].kind not in _FORKS:
                    raise InvalidArgument(f"join {node.id!r} does not name the FORK or FOR_EACH it closes")
                if nodes[node.fork].join != node.id:
                    raise InvalidArgument(f"join {node.id!r}: fork {node.fork!r} names another join")
                if node.queue is not None:
                    validate_name(node.queue, f"join {node.id!r} queue")
                edge(node, "next", node.next, True)
            elif kind is NodeKind.USER_TASK:
                _check_millis(node.timeout_millis, "timeout_millis", f"user task {node.id!r}")
                edge(node, "next", node.next, True)
                edge(node, "alt_next", node.alt_next, False)
            elif kind is NodeKind.SIGNAL:
                if node.signal is None:
                    raise InvalidArgument(f"signal node {node.id!r} names no signal to wait for")
                validate_name(node.signal, f"signal node {node.id!r} signal")
                if node.result_key is not None:
                    validate_name(node.result_key, f"signal node {node.id!r} result_key")
                _check_millis(node.timeout_millis, "timeout_millis", f"signal node {node.id!r}")
                edge(node, "next", node.next, True)
                edge(node, "alt_next", node.alt_next, False)
            elif kind is NodeKind.END:
                if node.next is not None or node.alt_next is not None:
                    raise InvalidArgument(f"end {node.id!r} must not have outgoing edges")
        for cp in self.checkpoints:
            if cp not in nodes or not nodes[cp].is_worker_step:
                raise InvalidArgument(f"checkpoint {cp!r} is not a TASK or PREDICATE node of {self.name!r}")

        # Every node is reachable from the start, and every node can reach an END.
        reachable = _closure([self.start_node], lambda n: _out_edges(nodes[n]))
        for node in self.nodes:
            if node.id not in reachable:
                raise InvalidArgument(
                    f"node {node.id!r} is unreachable from the start node {self.start_node!r}"
                )
        reverse: dict[str, list[str]] = {n: [] for n in nodes}
        for node in self.nodes:
            for target in _out_edges(node):
                reverse[target].append(node.id)
        ends = [n.id for n in self.nodes if n.kind is NodeKind.END]
        if not ends:
            raise InvalidArgument(f"workflow {self.name!r} has no END node")
        can_end = _closure(ends, lambda n: reverse[n])
        for node in self.nodes:
            if node.id not in can_end:
                raise InvalidArgument(f"node {node.id!r} cannot reach an END node (an endless loop?)")
        # Each branch of a fork must reach that fork's join.
        for node in self.nodes:
            if node.kind in _FORKS:
                assert node.join is not None
                for b in node.branches:
                    seen = _closure([b], lambda n, stop=node.join: [] if n == stop else _out_edges(nodes[n]))
                    if node.join not in seen:
                        raise InvalidArgument(
                            f"fork {node.id!r}: branch {b!r} never reaches join {node.join!r}"
                        )
        return self


_FORKS = (NodeKind.FORK, NodeKind.FOR_EACH)


def _check_key(key: object, field: str, node: Node) -> None:
    """A context key a node names: a non-empty string."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"node {node.id!r}: {field} must name a context key (a non-empty string)")


def _out_edges(node: Node) -> list[str]:
    out = [t for t in (node.next, node.alt_next) if t is not None]
    if node.kind in _FORKS:
        out.extend(node.branches)
    return out


def _closure(start: Iterable[str], step: object) -> set[str]:
    seen: set[str] = set()
    stack = list(start)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(step(n))  # type: ignore[operator]
    return seen


_definition_decoder = msgspec.json.Decoder(WorkflowDefinition)


def definition_from_json(data: bytes) -> WorkflowDefinition:
    """Decode and validate a definition; InvalidArgument names what is wrong."""
    try:
        definition = _definition_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"definition_json is not a valid workflow definition: {exc}") from None
    return definition.validate()
