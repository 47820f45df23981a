"""Graph validation of a workflow definition: every field in range, every edge sound.

``WorkflowDefinition.validate`` (``wiggle._model``) delegates here; the types stay in
``wiggle._model``, the rules about how they may be wired together live in this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._limits import MAX_ERROR_CHARS, MAX_FOR_EACH_CONCURRENCY, check_count, check_millis, check_text
from ._model import JoinMerge, Node, NodeKind, validate_name
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._model import WorkflowDefinition

__all__ = ["validate_definition"]


def validate_definition(definition: WorkflowDefinition) -> None:
    """Raise InvalidArgument naming the first problem found in ``definition``'s graph."""
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
    check_count(
        definition.max_local_steps, "max_local_steps", f"workflow {definition.name!r}", "0 = the server's cap"
    )
    if definition.default_retry is not None:
        definition.default_retry.check(f"workflow {definition.name!r}")
    check_millis(definition.timeout_millis, "timeout_millis", f"workflow {definition.name!r}")

    def edge(node: Node, field: str, target: str | None, required: bool) -> None:
        if target is None:
            if required:
                raise InvalidArgument(f"node {node.id!r} ({node.kind.value}) needs a {field!r} edge")
            return
        if target not in nodes:
            raise InvalidArgument(f"node {node.id!r}: {field!r} points to {target!r}, which does not exist")

    for node in definition.nodes:
        kind = node.kind
        if node.is_worker_step:
            if node.queue is not None:
                validate_name(node.queue, f"node {node.id!r} queue")
            edge(node, "next", node.next, True)
            edge(node, "alt_next", node.alt_next, kind is NodeKind.PREDICATE)
            if node.retry is not None:
                node.retry.check(f"node {node.id!r}")
            _check_step_limits(node)
        elif kind is NodeKind.SLEEP:
            check_millis(node.sleep_millis, "sleep_millis", f"sleep {node.id!r}")
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
            # at most MAX_FOR_EACH_CONCURRENCY branches at once (wiggle/_limits.py)
            check_count(
                node.concurrency,
                "concurrency",
                f"for_each {node.id!r}",
                "0 = the default",
                MAX_FOR_EACH_CONCURRENCY,
            )
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
                raise InvalidArgument(f"fork {node.id!r}: its join {node.join!r} is not a JOIN of this fork")
        elif kind is NodeKind.JOIN:
            if node.fork is None or node.fork not in nodes or nodes[node.fork].kind not in _FORKS:
                raise InvalidArgument(f"join {node.id!r} does not name the FORK or FOR_EACH it closes")
            if nodes[node.fork].join != node.id:
                raise InvalidArgument(f"join {node.id!r}: fork {node.fork!r} names another join")
            if node.combine and definition.join_merge is JoinMerge.LAST_WRITE_WINS:
                raise InvalidArgument(
                    f"join {node.id!r} has a combine step, but workflow {definition.name!r} joins "
                    "LAST_WRITE_WINS, where branches never conflict: a combine step would never run"
                )
            if node.queue is not None:
                validate_name(node.queue, f"join {node.id!r} queue")
            edge(node, "next", node.next, True)
        elif kind is NodeKind.USER_TASK:
            check_millis(node.timeout_millis, "timeout_millis", f"user task {node.id!r}")
            edge(node, "next", node.next, True)
            edge(node, "alt_next", node.alt_next, False)
        elif kind is NodeKind.SIGNAL:
            if node.signal is None:
                raise InvalidArgument(f"signal node {node.id!r} names no signal to wait for")
            validate_name(node.signal, f"signal node {node.id!r} signal")
            if node.result_key is not None:
                validate_name(node.result_key, f"signal node {node.id!r} result_key")
            check_millis(node.timeout_millis, "timeout_millis", f"signal node {node.id!r}")
            edge(node, "next", node.next, True)
            edge(node, "alt_next", node.alt_next, False)
        elif kind is NodeKind.END:
            if node.next is not None or node.alt_next is not None:
                raise InvalidArgument(f"end {node.id!r} must not have outgoing edges")
            if node.reason is not None:  # it becomes the instance's reason, kept as text
                check_text(node.reason, f"end {node.id!r} reason", MAX_ERROR_CHARS)
    for cp in definition.checkpoints:
        if cp not in nodes or not nodes[cp].is_worker_step:
            raise InvalidArgument(f"checkpoint {cp!r} is not a TASK or PREDICATE node of {definition.name!r}")

    # Every node is reachable from the start, and every node can reach an END.
    reachable = _closure([definition.start_node], lambda n: _out_edges(nodes[n]))
    for node in definition.nodes:
        if node.id not in reachable:
            raise InvalidArgument(
                f"node {node.id!r} is unreachable from the start node {definition.start_node!r}"
            )
    reverse: dict[str, list[str]] = {n: [] for n in nodes}
    for node in definition.nodes:
        for target in _out_edges(node):
            reverse[target].append(node.id)
    ends = [n.id for n in definition.nodes if n.kind is NodeKind.END]
    if not ends:
        raise InvalidArgument(f"workflow {definition.name!r} has no END node")
    can_end = _closure(ends, lambda n: reverse[n])
    for node in definition.nodes:
        if node.id not in can_end:
            raise InvalidArgument(f"node {node.id!r} cannot reach an END node (an endless loop?)")
    # Each branch of a fork must reach that fork's join.
    for node in definition.nodes:
        if node.kind in _FORKS:
            assert node.join is not None
            for b in node.branches:
                seen = _closure([b], lambda n, stop=node.join: [] if n == stop else _out_edges(nodes[n]))
                if node.join not in seen:
                    raise InvalidArgument(f"fork {node.id!r}: branch {b!r} never reaches join {node.join!r}")


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
