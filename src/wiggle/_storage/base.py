"""The Store protocol: the persistence primitives every store offers, and the records they return.

A store keeps definitions, instances, tokens and history. It does not know the engine: the
instance layer (wiggle/_server/instances.py) turns each operation into an engine transition and
hands it to ``mutate`` (lock and load the instance, run the transition, persist its ``Changes``,
commit, announce) or ``claim``. Every mutation is atomic per instance and acknowledged only after
its commit. Waiting (long-poll, await-completion, the clock) goes through ``Notifier``.
"""

from __future__ import annotations

import abc
import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import msgspec

from .._clock import WALL_CLOCK, Clock
from .._engine.engine import Claimed, LoadedDefinition
from .._engine.state import Changes, HistoryEntry, Instance, InstanceState, Token
from .._model import validate_name
from ..errors import FailedPrecondition, InvalidArgument, WiggleError
from .notifier import Notifier, not_yet_due, ready_counts
from .ops import NodeInfo, QueueStat, Readiness
from .queue_limits import QueueLimit
from .schedules import ScheduleStore

__all__ = [
    "SchemaMissing",
    "Store",
    "WorkflowRecord",
    "InstanceView",
    "InstanceQuery",
    "Notifier",
    "StoreStats",
    "Action",
    "ClaimTransition",
    "Skip",
    "NOTHING_SKIPPED",
    "AdmitAction",
    "ADMIT_BATCH",
    "not_yet_due",
    "ready_counts",
    "NewInstance",
    "StaleLatest",
    "check_version_alias",
    "instance_matches",
    "context_text",
    "CONTEXT_FIELD_PATTERN",
]


class SchemaMissing(FailedPrecondition):
    """The store's tables are not there: its schema was dropped, or never migrated, under a
    running server. Every call fails with it (FAILED_PRECONDITION, naming the schema and what to
    do) until the schema is back; the store logs it once a minute, the server's loops not at all."""


R = TypeVar("R")

#: Version aliases are upstream Wiggle's int32 workflow versions (proto/wiggle/_rpc/upstream).
ALIAS_MIN, ALIAS_MAX = -(2**31), 2**31 - 1


def check_version_alias(workflow: object, alias: object, version: object) -> None:
    """InvalidArgument unless ``workflow`` is a name, ``alias`` an int32 and ``version`` a non-empty string."""
    validate_name(workflow, "workflow")
    if not isinstance(alias, int) or isinstance(alias, bool):
        raise InvalidArgument(f"version alias must be an integer, got {type(alias).__name__}")
    if not ALIAS_MIN <= alias <= ALIAS_MAX:
        raise InvalidArgument(f"version alias {alias} is outside the int32 range [{ALIAS_MIN}, {ALIAS_MAX}]")
    if not isinstance(version, str) or not version:
        raise InvalidArgument(f"the version an alias names must be a non-empty string, got {version!r}")


# An operation on one locked instance: (definition, state, now) -> (result, what changed, or None
# when nothing did and nothing is to be written). It changes ``state`` in place and raises a
# WiggleError, before any change, to refuse.
Action = Callable[[LoadedDefinition, InstanceState, int], tuple[R, Changes | None]]
# The engine's claim transition for one due READY token: (definition, state, token, now, changes into).
ClaimTransition = Callable[[LoadedDefinition, InstanceState, Token, int, Changes], Claimed]
#: (workflow, version, node id) of the steps a claim passes over: the nodes its worker gave back
#: for lack of a handler (wiggle/_server/unrunnable.py).
Skip = frozenset[tuple[str, str, str]]
NOTHING_SKIPPED: Skip = frozenset()
# The admission of one workflow-level concurrency key (wiggle/_engine/workflow_limits.py):
# (its live instances oldest first, its waiting ones FIFO, each with its definition; now) -> the
# instances it changed and how. Runs under the key's lock with every instance named locked.
Loaded = list[tuple[LoadedDefinition, InstanceState]]
AdmitAction = Callable[[Loaded, Loaded, int], list[tuple[InstanceState, Changes]]]
#: The most waiting instances of one key an admission looks at (the oldest; a later one follows).
ADMIT_BATCH = 100


class NewInstance(msgspec.Struct):
    """An instance to insert: the engine's start (state and changes) and its optional request id."""

    state: InstanceState
    changes: Changes
    request_id: str = ""  # "" = no idempotency key
    #: The caller asked for the latest version and the store's ``workflow_for_start`` answered
    #: from memory: the store confirms at commit that it is still the latest (StaleLatest if not).
    expect_latest: bool = False
    #: Set by the store: the answer is another instance, the holder of this instance's
    #: ``dedup_key`` (docs/flow-control.md#deduplication), not one this request started.
    deduplicated: bool = False


class StaleLatest(WiggleError):
    """A start made from a remembered latest version found a newer one registered at commit; the
    start was not stored (the instance layer reads the latest version and starts again)."""


class WorkflowRecord(msgspec.Struct):
    """A registered definition version."""

    loaded: LoadedDefinition
    registered_at: int


class InstanceView(msgspec.Struct):
    """An instance and its active tokens, as returned to clients."""

    instance: Instance
    tokens: list[Token]


class InstanceQuery(msgspec.Struct):
    """Filters and paging for ListInstances (empty / 0 means no filter)."""

    workflow: str = ""
    status: str = ""  # an InstanceStatus value, or "" for any
    correlation_id: str = ""
    parent_id: str = ""  # a sub-workflow parent: only its children
    created_after: int = 0
    created_before: int = 0
    page_size: int = 50
    page_token: str = ""  # the last instance id of the previous page
    top_level: bool = False  # only instances no parent started (no sub-workflow children)
    node: str = ""  # only instances with an active token at this node
    text: str = ""  # a piece of the status reason or the error, any case
    # (field, value): the top-level context field's value as text equals value (JSON's text of a
    # number or a boolean, the string itself for a string); see context_text
    context: tuple[tuple[str, str], ...] = ()
    # False: the instances come without what holds user data and can be large (the context, open
    # joins, the retry point; their tokens without branch contexts), and the store does not read
    # it: a list shows none of it, and a page of 20,000-record contexts cost seconds and a gigabyte
    with_context: bool = True


#: A context field a query may name: a plain identifier (it is written into SQL as a literal).
CONTEXT_FIELD_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def context_text(value: object) -> str | None:
    """A context value as a context filter compares it: a string as itself (less any U+0000),
    null as None (never equal), anything else as its compact JSON text, as msgspec writes it (a
    number or a boolean, and an object or an array too: ``[1,2]``), less any escaped U+0000 in it.
    The same as PostgreSQL's ``context_text`` (migration 0015: ``->>`` of the stored JSON, which
    is msgspec's text; the escapes are left out of the whole document there first)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.replace("\x00", "")  # left out, as PostgreSQL's text cannot hold it
    text = msgspec.json.encode(value).decode()
    return _ESCAPED_NUL.sub(r"\1", text) if "\\u0000" in text else text


#: An escaped U+0000 in JSON text, stepping over escaped backslashes (``\\u0000`` is a backslash
#: and "u0000", kept): what migration 0015's regular expression leaves out.
_ESCAPED_NUL = re.compile(r"(\\\\)|\\u0000")


def instance_matches(query: InstanceQuery, inst: Instance, tokens: Iterable[Token]) -> bool:
    """Whether an instance passes the filters of ``query`` other than paging and time: the
    in-memory store's (and the reference for PostgreSQL's WHERE clause, wiggle/_storage/postgres/store.py)."""
    if query.workflow and inst.workflow != query.workflow:
        return False
    if query.status and inst.status != query.status:
        return False
    if query.correlation_id and inst.correlation_id != query.correlation_id:
        return False
    if query.parent_id and inst.parent_id != query.parent_id:
        return False
    if query.top_level and inst.parent_id:
        return False
    if query.node and not any(t.node_id == query.node for t in tokens):
        return False
    if query.text:
        needle = query.text.lower()  # as PostgreSQL's ILIKE
        if needle not in inst.reason.lower() and needle not in inst.error.lower():
            return False
    return all(context_text(inst.context.get(field)) == value for field, value in query.context)


class StoreStats(msgspec.Struct):
    """Counters a store keeps for metrics and the benchmark (transactions committed)."""

    transactions: int = 0


class Store(abc.ABC):
    """Persistence primitives for the instance layer. Every mutation is atomic per instance."""

    #: How many clock-duty mutations the instance layer may run at once on this store.
    clock_parallelism = 1
    #: The store's schedules (wiggle/_storage/schedules.py), set by each store.
    schedules: ScheduleStore

    def __init__(self) -> None:
        self.notifier = Notifier()
        self.stats = StoreStats()
        #: Where the store reads workflow time (claims, the ``now`` handed to actions): the
        #: instance layer's clock, set by ``Instances`` (wiggle/_clock.py); the wall clock if unset.
        self.clock: Clock = WALL_CLOCK
        #: The queues with limits (wiggle/_storage/queue_limits.py) as this store last knew them;
        #: their steps go through claims only, never the hand-off (wiggle/_server/delivery.py),
        #: unless ``hand_off_admits`` says the limit allows it.
        self.limited_queues: dict[str, QueueLimit] = {}

    def waiting_for(self, kind: str, subjects: Sequence[str]) -> contextlib.AbstractContextManager[None]:
        """Around one wait of this node for a wake-up: ``kind`` ``"work"`` (a poll, ``subjects``
        its queues) or ``"finished"`` (an instance, subject ``""``). Nothing here: every wake-up
        of this store comes from its own commits. The PostgreSQL store tells the other servers
        that this node wants their NOTIFYs of that kind (postgres/wakeups.py)."""
        return contextlib.nullcontext()

    def hand_off_admits(self, queue: str, now: int, spend: bool = False) -> bool:
        """Whether a READY step of limited ``queue`` may be handed to a waiting poll at ``now``,
        counted against the limit as a claim would be (``spend``: count it now), with no
        statement: the hand-off runs inside another commit's transition. False here: such steps
        are claimed. The PostgreSQL store says True while a fast rate's blocks have a moment due
        (postgres/rate_blocks.py)."""
        return False

    async def open(self) -> None:  # noqa: B027 (optional hook: the memory store needs none)
        """Connect, migrate, load caches."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release connections."""

    # ------------------------------------------------------------------ definitions

    @abc.abstractmethod
    async def put_definition(self, loaded: LoadedDefinition) -> tuple[WorkflowRecord, bool]:
        """Store a definition version; (record, created). An existing version is returned as is."""

    @abc.abstractmethod
    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        """A definition by name and version (latest if empty); NotFound naming what is missing."""

    async def workflow_for_start(self, name: str, version: str) -> tuple[WorkflowRecord, bool]:
        """The definition a start of ``name``/``version`` runs, and whether it was answered from
        memory as the latest (then the start's NewInstance sets ``expect_latest``, and the store
        checks it at commit). This default reads it (``get_workflow``): nothing to check."""
        return await self.get_workflow(name, version), False

    @abc.abstractmethod
    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        """Every registered version (of ``name``), oldest first."""

    @abc.abstractmethod
    async def put_version_alias(self, workflow: str, alias: int, version: str) -> None:
        """Make the int32 ``alias`` name ``version`` of ``workflow`` (upstream clients' version
        numbers); an existing alias is pointed at ``version`` (upsert). InvalidArgument for a bad
        name, alias or version (check_version_alias); NotFound if the version is not registered."""

    @abc.abstractmethod
    async def version_aliases(self, workflow: str) -> dict[int, str]:
        """Every alias of ``workflow`` and the version it names, by alias ascending ({} if none)."""

    # ------------------------------------------------------------------ instances

    @abc.abstractmethod
    async def insert(self, state: InstanceState, changes: Changes) -> None:
        """Persist a new instance (``changes`` from the engine's start), commit, announce."""

    @abc.abstractmethod
    async def insert_many(self, items: list[NewInstance]) -> list[str]:
        """Persist new instances, commit, announce; for each item, the id of the instance it names.

        An item whose request id an earlier start already used (or an earlier item of ``items``)
        is not inserted: its answer is the id of the instance that start created
        (docs/semantics.md#idempotent-starts). An item with a ``dedup_key`` held by another
        instance of its workflow (live, or finished within that one's window) is not inserted
        either: its answer is the holder, and the store sets its ``deduplicated``
        (docs/flow-control.md#deduplication). All items are committed before any is answered.
        """

    @abc.abstractmethod
    async def mutate(self, instance_id: str, missing: str, action: Action[R]) -> tuple[R, InstanceState]:
        """Lock and load ``instance_id``, run ``action``, persist its changes, commit, announce.

        Returns the action's result and the instance's state after it. NotFound(``missing``) if the
        instance does not exist; a WiggleError the action raises is raised with nothing written.
        """

    @abc.abstractmethod
    async def claim(
        self,
        worker_id: str,
        queues: list[str],
        max_tasks: int,
        transition: ClaimTransition,
        skip: Skip = NOTHING_SKIPPED,
    ) -> list[Claimed]:
        """Lease up to ``max_tasks`` due READY tokens on ``queues`` through ``transition``, oldest
        first; never one token twice. Commits and announces like ``mutate``. ``skip``: the nodes
        (workflow, version, node id) whose steps the claim passes over, leaving them READY as
        they were for other claims."""

    @abc.abstractmethod
    async def admit(
        self, workflow: str, key: str, action: AdmitAction
    ) -> list[tuple[InstanceState, Changes]]:
        """One admission of a workflow's concurrency key (docs/flow-control.md#workflow-concurrency):
        under a lock of (``workflow``, ``key``) held until the commit, lock and load the key's
        RUNNING instances (oldest first: created_at, id) and up to ADMIT_BATCH of its instances
        waiting for a slot (SCHEDULED with ``conc_since``, FIFO: conc_since, id), run ``action``,
        persist what it changed, commit, announce; what it changed. Admissions of one key, on any
        server, take turns, and every change of a key's live set upwards is made by one."""

    @abc.abstractmethod
    async def waiting_keys(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (workflow, key) pairs that have an instance waiting for a slot and,
        by the max of that instance's version, a free one (the clock duties' sweep admits them:
        an admission a crash lost is made good)."""

    @abc.abstractmethod
    async def concurrency_waiting(self) -> dict[str, int]:
        """Instances waiting for a slot of their workflow's concurrency limit, per workflow (the
        metric wiggle_workflow_concurrency_waiting_instances)."""

    # ------------------------------------------------------------------ queue limits

    @abc.abstractmethod
    async def set_queue_limit(self, limit: QueueLimit) -> None:
        """Keep ``limit`` (checked: check_queue_limit) as its queue's limits, replacing any; a
        limit with no limit set removes them. Applied by every later claim on any server
        (docs/flow-control.md#queue-limits)."""

    @abc.abstractmethod
    async def queue_limits(self) -> list[QueueLimit]:
        """Every queue's limits, by queue name."""

    @abc.abstractmethod
    async def rate_tats(self, keys: list[str]) -> dict[str, float]:
        """The rate state (``tat``, queue_limits.rate_admit) of those of ``keys`` (steps' rate
        keys, docs/flow-control.md#per-key-rate-limits) that have one; the others may go at once."""

    # ------------------------------------------------------------------ reads

    @abc.abstractmethod
    async def get_instance(self, instance_id: str) -> InstanceView:
        """An instance with its active tokens; NotFound if unknown."""

    @abc.abstractmethod
    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        """A page of instances, newest first, and the next page token ('' on the last page)."""

    @abc.abstractmethod
    async def history(self, instance_id: str) -> list[HistoryEntry]:
        """Every recorded step attempt and event of an instance, in order."""

    @abc.abstractmethod
    async def next_ready_at(self, queues: list[str]) -> int | None:
        """The earliest future ``available_at`` of a READY token on ``queues`` (a delayed retry)."""

    # ------------------------------------------------------------------ clock

    @abc.abstractmethod
    async def clock_leader(self) -> bool:
        """True if this node runs the clock duties now (one node of a cluster does)."""

    @abc.abstractmethod
    async def due_tokens(self, now: int, limit: int) -> list[str]:
        """Ids of tokens whose lease, timer or user-task deadline is due at ``now`` (each once)."""

    @abc.abstractmethod
    async def due_instances(self, now: int, limit: int) -> list[str]:
        """Ids of RUNNING instances whose time limit ran out at ``now`` (Instance.deadline_at)."""

    @abc.abstractmethod
    async def leases_of(self, owner_prefix: str, limit: int) -> list[tuple[str, str, int]]:
        """Up to ``limit`` leased (RUNNING) tokens whose lease owner starts with ``owner_prefix``:
        (task id ``<token id>@<claim>``, lease owner, claimed at ms). Revocation releases them
        (wiggle/_server/revocation.py); rare, so a scan is fine."""

    @abc.abstractmethod
    async def next_due_at(self) -> int | None:
        """When the clock duty next has something to do (ms), or None if nothing is scheduled:
        a due token, or an instance's time limit."""

    # The operational methods are abstract too: a store that forgot one (purge_finished, say) must
    # fail to be made, not silently never purge.

    @abc.abstractmethod
    async def purge_finished(self, older_than: int, limit: int) -> int:
        """Delete up to ``limit`` instances finished before ``older_than`` (ms); how many went."""

    @abc.abstractmethod
    async def orphaned_children(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` RUNNING sub-workflow children whose parent is finished or gone:
        (child id, parent id). docs/semantics.md#sub-workflows."""

    # ------------------------------------------------------------------ operating (issue #13)

    @abc.abstractmethod
    async def count_by_status(self) -> dict[str, dict[str, int]]:
        """Instances per workflow and status: {workflow: {status: n}}."""

    @abc.abstractmethod
    async def queue_stats(self, now: int) -> list[QueueStat]:
        """Every queue with READY or leased tokens, at ``now`` (ms)."""

    @abc.abstractmethod
    async def readiness(self) -> Readiness:
        """Whether the store can serve now (reachable, schema current)."""

    @abc.abstractmethod
    async def cluster_nodes(self) -> list[NodeInfo]:
        """The server nodes sharing this store."""

    @staticmethod
    def view(state: InstanceState) -> InstanceView:
        """An instance and its active tokens, as returned to clients."""
        return InstanceView(state.instance, list(state.tokens.values()))

    @staticmethod
    def view_without_context(state: InstanceState) -> InstanceView:
        """The same without the user data a list leaves out (InstanceQuery.with_context): shallow
        copies, the held context itself neither copied nor encoded."""
        inst = msgspec.structs.replace(state.instance, context={}, joins={}, retry_point=None)
        tokens = [
            t if t.context is None else msgspec.structs.replace(t, context=None)
            for t in state.tokens.values()
        ]
        return InstanceView(inst, tokens)
