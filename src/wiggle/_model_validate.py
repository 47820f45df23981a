"""Graph validation of a workflow definition: every field in range, every edge sound.

``WorkflowDefinition.validate`` (``wiggle._model``) delegates here; the types stay in
``wiggle._model``, the rules about how they may be wired together live in this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ._limits import (
    MAX_ERROR_CHARS,
    MAX_FOR_EACH_CONCURRENCY,
    MAX_RATE_PERIOD_MILLIS,
    check_count,
    check_millis,
    check_positive_count,
    check_text,
    exact_millis,
)
from ._model import LIMIT_STRATEGIES, JoinMerge, Limit, Node, NodeKind, RateLimit, validate_name
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._model import WorkflowDefinition

__all__ = ["validate_definition", "NODE_CHECKS", "check_workflow_limit"]


def validate_definition(definition: WorkflowDefinition) -> None:
    """Raise InvalidArgument naming the first problem found in ``definition``'s graph."""
    graph = _Graph(definition, _node_ids(definition))
    _check_header(definition)
    for node in definition.nodes:
        NODE_CHECKS[node.kind](node, graph)
        if node.limit is not None:
            _check_limit(node)
        if node.rate is not None:
            _check_rate(node)
    _check_groups(definition)
    for cp in definition.checkpoints:
        if cp not in graph.nodes or not graph.nodes[cp].is_worker_step:
            raise InvalidArgument(f"checkpoint {cp!r} is not a TASK or PREDICATE node of {definition.name!r}")
    _check_reachable(graph)
    _check_can_end(graph)
    _check_branches_reach_their_joins(graph)


class _Graph:
    """The definition under validation and its nodes by id; ``edge`` checks one outgoing edge."""

    __slots__ = ("definition", "nodes")

    def __init__(self, definition: WorkflowDefinition, nodes: dict[str, Node]) -> None:
        self.definition = definition
        self.nodes = nodes

    def edge(self, node: Node, field: str, target: str | None, required: bool) -> None:
        if target is None:
            if required:
                raise InvalidArgument(f"node {node.id!r} ({node.kind.value}) needs a {field!r} edge")
            return
        if target not in self.nodes:
            raise InvalidArgument(f"node {node.id!r}: {field!r} points to {target!r}, which does not exist")


def _node_ids(definition: WorkflowDefinition) -> dict[str, Node]:
    """The workflow's name and node ids are names, the ids unique, and there is at least one node."""
    validate_name(definition.name, "workflow name")
    if not definition.nodes:
        raise InvalidArgument(f"workflow {definition.name!r} has no nodes")
    nodes: dict[str, Node] = {}
    for node in definition.nodes:
        validate_name(node.id, "node id")
        if node.id in nodes:
            raise InvalidArgument(f"workflow {definition.name!r}: duplicate node id {node.id!r}")
        nodes[node.id] = node
    if definition.start_node not in nodes:
        raise InvalidArgument(
            f"workflow {definition.name!r}: start node {definition.start_node!r} does not exist"
        )
    return nodes


def _check_header(definition: WorkflowDefinition) -> None:
    """The definition-wide settings: the local step cap and the default retry policy."""
    check_count(
        definition.max_local_steps, "max_local_steps", f"workflow {definition.name!r}", "0 = the server's cap"
    )
    if definition.default_retry is not None:
        definition.default_retry.check(f"workflow {definition.name!r}")
    check_millis(definition.timeout_millis, "timeout_millis", f"workflow {definition.name!r}")
    if definition.concurrency is not None:
        check_workflow_limit(definition.name, definition.concurrency)


# ---------------------------------------------------------------------------- one check per kind


def _check_worker_step(node: Node, graph: _Graph) -> None:
    """A TASK or PREDICATE: its queue, its edges (a PREDICATE needs both), its retry policy."""
    if node.queue is not None:
        validate_name(node.queue, f"node {node.id!r} queue")
    graph.edge(node, "next", node.next, True)
    graph.edge(node, "alt_next", node.alt_next, node.kind is NodeKind.PREDICATE)
    if node.retry is not None:
        node.retry.check(f"node {node.id!r}")
    _check_step_limits(node)


# A heartbeat timeout shorter than this could not be kept by a worker heartbeating every third of
# it over a real network (the server's shortest lease is 1 s too: docs/semantics.md#leases).
MIN_HEARTBEAT_TIMEOUT_MILLIS = 1_000


def _check_step_limits(node: Node) -> None:
    """A worker step's time limits: each in [0, 10 years]; a heartbeat timeout of 1 s or more."""
    what = f"step {node.id!r}"
    check_millis(node.timeout_millis, "timeout_millis", what)
    check_millis(node.heartbeat_timeout_millis, "heartbeat_timeout_millis", what)
    check_millis(node.schedule_to_start_millis, "schedule_to_start_millis", what)
    if 0 < node.heartbeat_timeout_millis < MIN_HEARTBEAT_TIMEOUT_MILLIS:
        raise InvalidArgument(
            f"{what}: heartbeat_timeout_millis {node.heartbeat_timeout_millis} is below the minimum "
            f"{MIN_HEARTBEAT_TIMEOUT_MILLIS} ms"
        )


#: The longest context key (or group name) a concurrency limit may name.
MAX_LIMIT_KEY_CHARS = 200


def _check_limit(node: Node) -> None:
    """A step's concurrency limit (docs/flow-control.md#concurrency-limits): on a worker step only,
    a context key, a max of at least 1, a group that is a name, and no strategy but "queue"."""
    limit = node.limit
    assert limit is not None
    what = f"step {node.id!r}"
    if not node.is_worker_step:
        raise InvalidArgument(
            f"node {node.id!r} is a {node.kind.value}: only a TASK or PREDICATE takes a concurrency limit"
        )
    _check_key_and_max(limit, what)
    if limit.group is not None:
        validate_name(limit.group, f"{what} concurrency group")
    if limit.strategy != "queue":
        raise InvalidArgument(
            f"{what}: a step's concurrency limit only queues (its steps wait for a slot); strategy "
            f"{limit.strategy!r} is for a workflow's limit (Workflow.define(..., concurrency=Limit(...)))"
        )


def check_workflow_limit(name: str, limit: Limit) -> None:
    """A workflow's concurrency limit (docs/flow-control.md#workflow-concurrency): a context key, a
    max of at least 1, a known strategy, and no group (it counts the workflow's own instances)."""
    what = f"workflow {name!r}"
    _check_key_and_max(limit, what)
    if limit.strategy not in LIMIT_STRATEGIES:
        raise InvalidArgument(
            f"{what}: concurrency strategy {limit.strategy!r} is not one of {', '.join(LIMIT_STRATEGIES)}"
        )
    if limit.group is not None:
        raise InvalidArgument(
            f"{what}: a workflow's concurrency limit takes no group (it counts the live instances "
            "of this workflow per value of its key)"
        )


def _check_key_and_max(limit: Limit, what: str) -> None:
    """A limit's key names a context key (1 to MAX_LIMIT_KEY_CHARS characters, no NUL) and its
    max is an integer of at least 1."""
    key = limit.key
    if not isinstance(key, str) or not key or len(key) > MAX_LIMIT_KEY_CHARS or "\x00" in key:
        raise InvalidArgument(
            f"{what}: a concurrency limit's key must name a context key (1 to {MAX_LIMIT_KEY_CHARS} "
            f"characters), got {key!r}"
        )
    check_positive_count(limit.max, "concurrency max", what)


def _check_sleep(node: Node, graph: _Graph) -> None:
    check_millis(node.sleep_millis, "sleep_millis", f"sleep {node.id!r}")
    graph.edge(node, "next", node.next, True)


def _check_sub_workflow(node: Node, graph: _Graph) -> None:
    validate_name(node.workflow, f"sub-workflow {node.id!r} workflow")
    if node.version is not None:
        validate_name(node.version, f"sub-workflow {node.id!r} version")
    for key in node.input_keys or ():
        _check_key(key, "input_keys", node)
    if node.result_key is not None:
        _check_key(node.result_key, "result_key", node)
    graph.edge(node, "next", node.next, True)
    graph.edge(node, "alt_next", node.alt_next, False)
    if node.retry is not None:
        node.retry.check(f"node {node.id!r}")


def _check_for_each(node: Node, graph: _Graph) -> None:
    if node.items_key is None:
        raise InvalidArgument(f"for_each {node.id!r} needs an items_key (the list to fan out)")
    for field in ("items_key", "item_key", "index_key", "output_key", "result_key"):
        if getattr(node, field) is not None:
            _check_key(getattr(node, field), field, node)
    # at most MAX_FOR_EACH_CONCURRENCY branches at once (wiggle/_limits.py)
    check_count(
        node.concurrency, "concurrency", f"for_each {node.id!r}", "0 = the default", MAX_FOR_EACH_CONCURRENCY
    )
    if len(node.branches) != 1:
        raise InvalidArgument(
            f"for_each {node.id!r} needs exactly one body (branches), got {len(node.branches)}"
        )
    graph.edge(node, "branches", node.branches[0], True)
    join = _closing_join(node, graph, "for_each")
    if join.combine:
        raise InvalidArgument(f"join {join.id!r} of for_each {node.id!r} cannot have a combine step")


def _check_fork(node: Node, graph: _Graph) -> None:
    if not node.branches:
        raise InvalidArgument(f"fork {node.id!r} has no branches")
    for b in node.branches:
        graph.edge(node, "branches", b, True)
    _closing_join(node, graph, "fork")


def _closing_join(node: Node, graph: _Graph, what: str) -> Node:
    """The JOIN a FORK or FOR_EACH (``what``) names, which must name it back."""
    if node.join is None:
        raise InvalidArgument(f"{what} {node.id!r} has no join")
    graph.edge(node, "join", node.join, True)
    join = graph.nodes[node.join]
    if join.kind is not NodeKind.JOIN or join.fork != node.id:
        raise InvalidArgument(f"{what} {node.id!r}: its join {node.join!r} is not a JOIN of this {what}")
    return join


def _check_join(node: Node, graph: _Graph) -> None:
    nodes = graph.nodes
    if node.fork is None or node.fork not in nodes or nodes[node.fork].kind not in _FORKS:
        raise InvalidArgument(f"join {node.id!r} does not name the FORK or FOR_EACH it closes")
    if nodes[node.fork].join != node.id:
        raise InvalidArgument(f"join {node.id!r}: fork {node.fork!r} names another join")
    if node.combine and graph.definition.join_merge is JoinMerge.LAST_WRITE_WINS:
        raise InvalidArgument(
            f"join {node.id!r} has a combine step, but workflow {graph.definition.name!r} joins "
            "LAST_WRITE_WINS, where branches never conflict: a combine step would never run"
        )
    if node.queue is not None:
        validate_name(node.queue, f"join {node.id!r} queue")
    graph.edge(node, "next", node.next, True)


def _check_user_task(node: Node, graph: _Graph) -> None:
    check_millis(node.timeout_millis, "timeout_millis", f"user task {node.id!r}")
    graph.edge(node, "next", node.next, True)
    graph.edge(node, "alt_next", node.alt_next, False)


def _check_signal(node: Node, graph: _Graph) -> None:
    if node.signal is None:
        raise InvalidArgument(f"signal node {node.id!r} names no signal to wait for")
    validate_name(node.signal, f"signal node {node.id!r} signal")
    if node.result_key is not None:
        validate_name(node.result_key, f"signal node {node.id!r} result_key")
    check_millis(node.timeout_millis, "timeout_millis", f"signal node {node.id!r}")
    graph.edge(node, "next", node.next, True)
    graph.edge(node, "alt_next", node.alt_next, False)


def _check_end(node: Node, graph: _Graph) -> None:
    if node.next is not None or node.alt_next is not None:
        raise InvalidArgument(f"end {node.id!r} must not have outgoing edges")
    if node.reason is not None:  # it becomes the instance's reason, kept as text
        check_text(node.reason, f"end {node.id!r} reason", MAX_ERROR_CHARS)


#: How each node kind's fields and edges are checked (every NodeKind has one: a test checks,
#: tests/engine/test_kind_tables.py).
NODE_CHECKS: dict[NodeKind, Callable[[Node, _Graph], None]] = {
    NodeKind.TASK: _check_worker_step,
    NodeKind.PREDICATE: _check_worker_step,
    NodeKind.SLEEP: _check_sleep,
    NodeKind.FORK: _check_fork,
    NodeKind.JOIN: _check_join,
    NodeKind.USER_TASK: _check_user_task,
    NodeKind.END: _check_end,
    NodeKind.SIGNAL: _check_signal,
    NodeKind.SUB_WORKFLOW: _check_sub_workflow,
    NodeKind.FOR_EACH: _check_for_each,
}


# ---------------------------------------------------------------------------- the graph as a whole


def _check_reachable(graph: _Graph) -> None:
    """Every node is reachable from the start. When one is not because the start runs into a
    cycle that nothing leaves, the cycle is what is reported: the END it keeps out of reach is
    only its consequence (``_check_way_out``)."""
    start = graph.definition.start_node
    reachable = _closure([start], lambda n: _out_edges(graph.nodes[n]))
    for node in graph.definition.nodes:
        if node.id not in reachable:
            _check_way_out(graph)
            raise InvalidArgument(f"node {node.id!r} is unreachable from the start node {start!r}")


def _check_way_out(graph: _Graph) -> None:
    """InvalidArgument naming the cycle if the start can reach no END node although there is one:
    every path from the start then runs into a cycle with no way out of it (``a -> b -> a``).
    (A workflow with no END at all is ``_check_can_end``'s to report.)"""
    ends = [n.id for n in graph.definition.nodes if n.kind is NodeKind.END]
    start = graph.definition.start_node
    if not ends or start in _can_end(graph, ends):
        return
    path: list[str] = []
    seen: dict[str, int] = {}
    node = start
    while node not in seen:  # every node but an END has an edge out (NODE_CHECKS), none to an END
        seen[node] = len(path)
        path.append(node)
        node = _out_edges(graph.nodes[node])[0]
    cycle = " -> ".join(repr(n) for n in [*path[seen[node] :], node])
    lead = f"the start node {start!r} leads into {cycle}" if node != start else cycle
    raise InvalidArgument(
        f"workflow {graph.definition.name!r} can never end: {lead}, a cycle with no way out (no path "
        "from it reaches an END node); give the loop an exit, e.g. a PREDICATE whose other edge "
        "leads out of it"
    )


def _can_end(graph: _Graph, ends: list[str]) -> set[str]:
    """The nodes from which one of ``ends`` can be reached."""
    reverse: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for node in graph.definition.nodes:
        for target in _out_edges(node):
            reverse[target].append(node.id)
    return _closure(ends, lambda n: reverse[n])


def _check_can_end(graph: _Graph) -> None:
    """There is an END, and every node can reach one."""
    ends = [n.id for n in graph.definition.nodes if n.kind is NodeKind.END]
    if not ends:
        raise InvalidArgument(f"workflow {graph.definition.name!r} has no END node")
    can_end = _can_end(graph, ends)
    for node in graph.definition.nodes:
        if node.id not in can_end:
            raise InvalidArgument(f"node {node.id!r} cannot reach an END node (an endless loop?)")


def _check_branches_reach_their_joins(graph: _Graph) -> None:
    """Each branch of a fork (and a for_each's body) reaches that fork's join."""
    for node in graph.definition.nodes:
        if node.kind not in _FORKS:
            continue
        join = node.join
        assert join is not None

        def step(n: str, stop: str = join) -> list[str]:
            return [] if n == stop else _out_edges(graph.nodes[n])

        for b in node.branches:
            if join not in _closure([b], step):
                raise InvalidArgument(f"fork {node.id!r}: branch {b!r} never reaches join {join!r}")


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


def _closure(start: Iterable[str], step: Callable[[str], Iterable[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(start)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(step(n))
    return seen


def _check_groups(definition: WorkflowDefinition) -> None:
    """The steps of one workflow naming one concurrency or rate group give it one budget: the
    same ``max`` (and ``period``). Each claim counts against its own step's figures, so two
    budgets in one group would let the looser step run past the stricter one's
    (docs/flow-control.md#per-key-rate-limits)."""
    first: dict[tuple[str, str], tuple[str, tuple[tuple[str, object], ...]]] = {}
    for node in definition.nodes:
        shares: list[tuple[str, str | None, tuple[tuple[str, object], ...]]] = []
        if node.limit is not None:
            shares.append(("concurrency", node.limit.group, (("max", node.limit.max),)))
        if node.rate is not None:
            shares.append(("rate", node.rate.group, (("max", node.rate.max), ("period", node.rate.period))))
        for kind, group, budget in shares:
            if group is None:
                continue
            other, other_budget = first.setdefault((kind, group), (node.id, budget))
            if other_budget != budget:
                shown = [", ".join(f"{name}={value}" for name, value in b) for b in (other_budget, budget)]
                raise InvalidArgument(
                    f"workflow {definition.name!r}: steps {other!r} and {node.id!r} share the {kind} "
                    f"group {group!r} with different budgets ({shown[0]} on {other!r}, {shown[1]} on "
                    f"{node.id!r}); the steps of a group must give it the same "
                    + " and ".join(name for name, _ in budget)
                )


def _check_rate(node: Node) -> None:
    """A rate limit (docs/flow-control.md#per-key-rate-limits): on a worker step only, a context
    key when one is named, a max of at least 1, a period from 1 ms to a day, a group that is a
    name."""
    rate = node.rate
    assert rate is not None
    what = f"step {node.id!r}"
    if not node.is_worker_step:
        raise InvalidArgument(
            f"node {node.id!r} is a {node.kind.value}: only a TASK or PREDICATE takes a rate limit"
        )
    key = rate.key
    if key is not None and (
        not isinstance(key, str) or not key or len(key) > MAX_LIMIT_KEY_CHARS or "\x00" in key
    ):
        raise InvalidArgument(
            f"{what}: a rate limit's key must name a context key (1 to {MAX_LIMIT_KEY_CHARS} characters), "
            "or be left out for one budget for all"
        )
    check_positive_count(rate.max, "rate limit max", what)
    period = rate.period
    if (
        isinstance(period, bool)
        or not isinstance(period, (int, float))
        or not math.isfinite(period)
        or not 1 <= round(period * 1000) <= MAX_RATE_PERIOD_MILLIS
    ):
        raise InvalidArgument(_rate_period_range(what, period))
    if rate.group is not None:
        validate_name(rate.group, f"{what} rate limit group")


def _rate_period_range(what: str, period: object) -> str:
    return (
        f"{what}: rate limit period must be from 0.001 to {MAX_RATE_PERIOD_MILLIS // 1000} seconds "
        f"(a day), got {period!r}"
    )


def check_rate_period_in_millis(rate: RateLimit, what: str) -> None:
    """A step's rate limit period is a whole number of milliseconds, the unit the stores count
    rates in: ``period=0.0006`` ran as 1 ms and ``0.0016`` as 2 ms (an outside trial). One under
    1 ms gets _check_rate's range message.

    The SDK's check, made when a step is added (wiggle/_workflow_branch.py), not by
    validate_definition: a store re-validates the definitions it loads
    (wiggle/_storage/postgres/definitions.py), and one registered before this check must still
    load. Anything but a finite number is left to _check_rate."""
    period = rate.period
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not math.isfinite(period):
        return
    exact = exact_millis(period)
    if exact == exact.to_integral_value():
        return
    if exact < 1:
        raise InvalidArgument(_rate_period_range(what, period))
    raise InvalidArgument(
        f"{what}: rate limit period must be a whole number of milliseconds (rates are counted in "
        f"them), got {period!r} ({exact.normalize():f} ms)"
    )
