"""Runtime state: instances, tokens, join bookkeeping and history entries.

Plain mutable msgspec Structs: the engine mutates them inside one transition; a store loads them,
hands them to the engine under the instance lock, and persists what the transition changed.
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

from .._status import (
    FINISHED_INSTANCE_STATUSES,
    LIVE_INSTANCE_STATUSES,
    HistoryOutcome,
    InstanceStatus,
    TokenStatus,
)

__all__ = [
    "Instance",
    "Token",
    "JoinState",
    "PendingSignal",
    "RetryPoint",
    "HistoryEntry",
    "Changes",
    "InstanceState",
    "new_instance_id",
    "InstanceIds",
    "token_instance_id",
    "task_id_of",
    "split_task_id",
    "now_millis",
    "InstanceStatus",
    "TokenStatus",
    "HistoryOutcome",
    "ACTIVE_TOKEN_STATUSES",
    "FINISHED_INSTANCE_STATUSES",
    "LIVE_INSTANCE_STATUSES",
]


ACTIVE_TOKEN_STATUSES = frozenset(
    {TokenStatus.READY, TokenStatus.RUNNING, TokenStatus.WAITING, TokenStatus.AWAITING, TokenStatus.JOINED}
)


def now_millis() -> int:
    """Wall-clock milliseconds since the epoch (the unit of every timestamp)."""
    return time.time_ns() // 1_000_000


class InstanceIds:
    """Makes instance ids from one clock's times (wiggle/_clock.py).

    An id is ``wi-`` + 12 hex ms + 4 hex seq + 8 hex random: unique, URL-safe and sortable by
    time, because the ms part never goes back (a repeated or earlier ms reuses the last one with
    the next seq). Each clock has its own: a test kit's virtual clock, running days ahead, must
    not drag the ids of wall-clock servers in the same process into its future.
    """

    __slots__ = ("last_ms", "counter")

    def __init__(self) -> None:
        self.last_ms = 0
        self.counter = 0

    def __call__(self, now: int | None = None) -> str:
        ms = now_millis() if now is None else now
        if ms <= self.last_ms:
            ms = self.last_ms
            self.counter += 1
        else:
            self.last_ms = ms
            self.counter = 0
        return f"wi-{ms:012x}{self.counter & 0xFFFF:04x}{os.urandom(4).hex()}"


#: The ids of every instance layer on the wall clock.
new_instance_id = InstanceIds()


def token_instance_id(token_id: str) -> str:
    """Token ids are ``<instance id>.<n>``: the instance a token belongs to, without a lookup.

    A task id (``<token id>@<claim>``, task_id_of) names the same instance.
    """
    instance_id, _, _ = token_id.rpartition(".")
    return instance_id


def task_id_of(token: Token) -> str:
    """The task id of the token's current claim: ``<token id>@<claim>`` (docs/semantics.md#fencing).

    A token keeps its id from node to node and a worker keeps its id from step to step, so neither
    tells one claim from the next; the claim number does. Every report names the task id it was
    given, and a report for an earlier claim of the token is refused (tokens.leased_token).
    """
    return f"{token.id}@{token.claim}"


def split_task_id(task_id: str) -> tuple[str, int | None]:
    """(token id, claim) of a task id; claim None for a bare token id (in-process callers only)."""
    token_id, at, claim = task_id.rpartition("@")
    if not at:
        return task_id, None
    if not claim.isdigit() or len(claim) > 18:
        return task_id, -1  # names no claim that exists: refused as an earlier one
    return token_id, int(claim)


class JoinState(msgspec.Struct):
    """One fork's barrier: the fork-time context and the branch contexts that have arrived."""

    fork_node: str
    branch_count: int
    base: dict[str, Any]
    # branch index (as str, for JSON) -> branch context, in the order the branches arrived: a
    # LAST_WRITE_WINS join folds in that order (the PostgreSQL store keeps it: msgspec encodes and
    # decodes a dict in insertion order, wiggle/_storage/postgres/codecs.py). With ``diffs``, only
    # the keys the branch set (its shallow diff against ``base``), its removed keys in ``removed``.
    arrived: dict[str, dict[str, Any]] = {}
    joined_tokens: list[str] = []  # in arrival order too
    # A FOR_EACH's barrier (docs/semantics.md#for-each): the elements started so far, and each
    # finished branch's result (its output_key) by index; ``arrived`` stays empty.
    for_each: bool = False
    started: int = 0
    results: dict[str, Any] = {}
    # On the main line the fork-time context is the instance's own (unchanged while the branches
    # run): ``base`` stays empty instead of repeating it, so a long list is not rewritten with
    # every arrival.
    base_is_context: bool = False
    results_bytes: int = 0  # the JSON size of ``results`` so far (bounded by the payload limit)
    # A LAST_WRITE_WINS FOR_EACH (docs/semantics.md#last-write-wins-joins) keeps no ``results``:
    # the writes of the branches finished so far, merged in arrival order (keys set, keys
    # removed), and how many have finished. ``results_bytes`` then bounds ``merged``'s size.
    merged: dict[str, Any] = {}
    # ``arrived`` holds each branch's changes, not its whole context: a fork made while the server
    # ran with ``join_diffs`` (EngineConfig; WIGGLE_JOIN_DIFFS). Every server of this release folds
    # both kinds; a server of an earlier release would take a diff for a whole context, hence the
    # setting (docs/upgrading.md). A fork of 200 branches over a 100 KB context kept 20 MB of
    # branch contexts in the instance and wrote them again with every arrival: 31.8 s and a 7.8 GB
    # server peak on PostgreSQL, 5.0 s and 314 MB with diffs (bench/README.md, "Round thirty-seven").
    diffs: bool = False
    removed: dict[str, list[str]] = {}  # with ``diffs``: branch index -> the keys it removed
    merged_removed: list[str] = []
    merged_count: int = 0


class PendingSignal(msgspec.Struct):
    """A signal sent before the instance reached a wait for it: buffered on the instance."""

    name: str
    data: dict[str, Any]
    signal_id: str = ""
    sent_at: int = 0
    sender: str = ""  # who sent it, for the history entry of the wait that takes it


class RetryPoint(msgspec.Struct):
    """Where a FAILED instance stood when it failed: what ``retry`` restarts from.

    ``tokens`` are copies of the tokens active at the failure (the one that failed included),
    ``joins`` the fork barriers then open.
    """

    tokens: list[Token] = []
    joins: dict[str, JoinState] = {}


class Instance(msgspec.Struct):
    """One run of a workflow version."""

    id: str
    workflow: str
    version: str
    status: InstanceStatus
    context: dict[str, Any]
    correlation_id: str = ""
    reason: str = ""
    error: str = ""
    created_at: int = 0
    updated_at: int = 0
    finished_at: int = 0
    token_seq: int = 0
    joins: dict[str, JoinState] = {}
    steps: int = 0  # worker steps applied so far (the runaway guard)
    schedule_id: str = ""  # the schedule whose tick started it (docs/semantics.md#schedules)
    schedule_tick_at: int = 0  # that tick's time (ms)
    signals: list[PendingSignal] = []  # buffered, not yet consumed (docs/semantics.md#signal)
    signal_ids: list[str] = []  # the latest signal ids seen (duplicates are detected by these)
    retry_point: RetryPoint | None = None  # set when the instance fails; used by retry
    parent_id: str = ""  # a sub-workflow's parent instance (docs/semantics.md#sub-workflows)
    parent_token: str = ""  # the parent token waiting for this child
    depth: int = 0  # 0 for a top-level instance, parent's + 1 for a child
    traceparent: str = ""  # W3C trace context of the start (tracing; docs/semantics.md#tracing)
    # the workflow's time limit (ms; 0: none) and when it runs out: still RUNNING then, the
    # instance fails (docs/semantics.md#workflow-time-limits); a retry counts it afresh
    timeout_millis: int = 0
    deadline_at: int = 0
    # Start options (docs/flow-control.md, wiggle/_engine/start_options.py); migration 0012.
    priority: int = 0  # copied to every token: higher is claimed first (with aging)
    start_at: int = 0  # a delayed start's time (ms); 0: started at once
    dedup_key: str = ""  # the deduplication key it holds for its workflow ("" none)
    dedup_window: int = 0  # how long (ms) after it finishes it still holds the key
    # A workflow-level concurrency limit (docs/flow-control.md#workflow-concurrency,
    # wiggle/_engine/workflow_limits.py; migration 0016): the key's label it counts under
    # ("account_id=42"; "" no limit) and the limit's max, both set at its start; since when it
    # waits SCHEDULED for a slot (ms; 0 not waiting: live, delayed or finished); a retry waiting
    # for a slot: the retry's request as JSON ("" none).
    conc_key: str = ""
    conc_max: int = 0
    conc_since: int = 0
    conc_retry: str = ""


class Token(msgspec.Struct):
    """Where execution is. Advanced in place from node to node; ``context`` is None on the main line."""

    id: str
    instance_id: str
    node_id: str
    status: TokenStatus
    kind: str = "TASK"
    queue: str = ""
    attempt: int = 1
    available_at: int = 0
    lease_owner: str = ""
    lease_expires_at: int = 0
    last_error: str = ""
    context: dict[str, Any] | None = None  # a fork branch's own context
    fork_stack: list[tuple[str, int]] = []  # (join group id, branch index), innermost last
    started_at: int = 0  # when the current attempt was claimed
    local_run_owner: str = ""
    local_run_steps: int = 0
    created_at: int = 0
    finished_at: int = 0
    child_id: str = ""  # at a SUB_WORKFLOW node: the child instance this attempt starts / waits for
    claim: int = 0  # how many times the token was claimed: the fence of task ids (task_id_of)
    # RUNNING: the attempt's start-to-close deadline (its step's timeout; the lease never outlives
    # it); 0: none (docs/semantics.md#step-time-limits)
    deadline_at: int = 0
    priority: int = 0  # its instance's (migration 0012): orders the claims of a queue (start_options.py)
    # At a step with a concurrency limit (wiggle/_engine/limits.py; migration 0014): the key it is
    # counted under while RUNNING there, and that key's most attempts at once ("", 0: no limit).
    limit_key: str = ""
    limit_max: int = 0
    # At a step with a rate limit (wiggle/_engine/limits.py; migration 0017), while READY: the key
    # its claim is counted under and that key's rate (claims per period); "", 0: no rate limit.
    rate_key: str = ""
    rate_max: int = 0
    rate_period_millis: int = 0
    # Set by a store's claim on a queue with a concurrency limit (wiggle/_storage/queue_limits.py):
    # while RUNNING, the token counts against its queue's max_running. Meaningless once not RUNNING.
    queue_held: bool = False
    # Set by a report's transition that leased this claim to the reporting worker (a chained step,
    # the server's Delivery.chain; migration 0025): "<the report's task id> <this claim's task id>".
    # A resend of that report, its answer lost, is answered with this step again while the claim
    # stands untouched (docs/semantics.md#chained-steps). "": claimed by a poll.
    chained_from: str = ""


class HistoryEntry(msgspec.Struct, gc=False):
    """One step attempt, or one server-side event, of an instance.

    ``gc=False``: an entry holds only strings, ints and enum members, so it can never be part of a
    reference cycle; untracked, the many entries a store holds cost the garbage collector nothing (they
    used to make up most of its tracked objects: bench/README.md, "per-step cost").
    """

    instance_id: str
    token_id: str
    node_id: str
    kind: str
    attempt: int
    worker_id: str
    started_at: int
    ended_at: int
    outcome: str  # a HistoryOutcome (a plain str once loaded back from a store)
    error: str = ""
    child_id: str = ""  # a SUB_WORKFLOW entry: the child instance
    traceback: str = ""  # a failed attempt's traceback as the worker sent it (bounded), else ""


class Changes:
    """What one transition changed, for the store to persist and the server to announce."""

    __slots__ = (
        "tokens",
        "history",
        "ready_queues",
        "finished",
        "timers",
        "instance_changed",
        "created",
        "handoffs",
        "freed",
    )

    def __init__(self) -> None:
        self.tokens: dict[str, Token] = {}  # every token created or changed (finished ones too)
        self.history: list[HistoryEntry] = []
        self.ready_queues: set[str] = set()  # queues that gained a READY token
        self.finished = False  # the instance reached a final status
        self.timers = False  # a new timer or deadline exists
        self.instance_changed = False
        self.created = False  # the instance is new (start)
        # steps leased inside this transition to waiting pollers, delivered after the commit
        # (wiggle/_storage/handoff.py); None when there are none
        self.handoffs: list[Any] | None = None
        # queues where an attempt left a limit's slot (limits.leave): their pollers must hear of
        # it even when this transition leases its own next step there (delivery.py _unannounce)
        self.freed: set[str] | None = None

    def absorb(self, later: Changes) -> None:
        """Add what a later transition of the same instance changed (one commit for both)."""
        self.tokens.update(later.tokens)
        self.history.extend(later.history)
        self.ready_queues |= later.ready_queues
        self.finished = self.finished or later.finished
        self.timers = self.timers or later.timers
        self.instance_changed = self.instance_changed or later.instance_changed
        self.created = self.created or later.created
        if later.handoffs:
            if self.handoffs is None:
                self.handoffs = []
            self.handoffs.extend(later.handoffs)
        if later.freed:
            self.freed = (self.freed or set()) | later.freed


class InstanceState:
    """An instance and its active tokens, as loaded by a store under the instance lock."""

    __slots__ = ("instance", "tokens")

    def __init__(self, instance: Instance, tokens: dict[str, Token]) -> None:
        self.instance = instance
        self.tokens = tokens
