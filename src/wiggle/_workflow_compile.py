"""Compile a workflow's item tree into definition nodes and its handler table, and the result: a
``Blueprint`` (the definition the server keeps, the handlers a worker runs)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from ._model import Node, NodeKind, WorkflowDefinition
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
    SubWorkflowItem,
    UserTaskItem,
)
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._workflow_branch import Branch

__all__ = ["Blueprint", "Compiler", "HandlerKind", "ItemRule", "ITEM_RULES", "registration_order"]

C = TypeVar("C")


class HandlerKind:
    """What a handler is called for."""

    TASK = "TASK"
    PREDICATE = "PREDICATE"
    COMBINE = "COMBINE"


class Compiler:
    """Compiles one workflow: ``sequence`` walks a branch's items last to first, so each node is
    made knowing its successor; ``items_of`` reads a branch's items (kept private to the DSL)."""

    def __init__(self, name: str, items_of: Callable[[Branch[Any]], list[Item]]) -> None:
        self.name = name
        self.items_of = items_of
        self.nodes: list[Node] = []
        self.handlers: dict[str, tuple[str, Callable[..., Any]]] = {}
        self.checkpoints: set[str] = set()
        self._ids: set[str] = set()

    def _node(self, node: Node) -> str:
        if node.id in self._ids:
            raise InvalidArgument(f"duplicate node id {node.id!r}")
        self._ids.add(node.id)
        self.nodes.append(node)
        return node.id

    def _worker(self, step: StepItem, kind: NodeKind, next_id: str, alt: str | None) -> str:
        self.handlers[step.name] = (
            HandlerKind.PREDICATE if kind is NodeKind.PREDICATE else HandlerKind.TASK,
            step.fn,
        )
        if step.checkpoint:
            self.checkpoints.add(step.name)
        limits = step.limits
        return self._node(
            Node(
                id=step.name,
                kind=kind,
                next=next_id,
                alt_next=alt,
                queue=step.queue,
                retry=step.retry,
                timeout_millis=limits.timeout,
                heartbeat_timeout_millis=limits.heartbeat,
                schedule_to_start_millis=limits.schedule_to_start,
                limit=step.concurrency,
                rate=step.rate_limit,
            )
        )

    def sequence(self, branch: Branch[Any], next_id: str) -> str:
        current = next_id
        for item in reversed(self.items_of(branch)):
            current = self.item(item, current)
        return current

    def item(self, item: Item, next_id: str) -> str:
        """The nodes of one item, made knowing its successor ``next_id``; returns its first node's id."""
        return ITEM_RULES[type(item)].compile(self, item, next_id)


# ---------------------------------------------------------------------------- one compiler per item


def _compile_step(c: Compiler, item: StepItem, next_id: str) -> str:
    return c._worker(item, NodeKind.TASK, next_id, None)


def _compile_gate(c: Compiler, item: GateItem, next_id: str) -> str:
    """A PREDICATE whose false path ends the instance at its own END (reason ``gated:<name>``)."""
    end = c._node(Node(id=f"gated.{item.name}", kind=NodeKind.END, reason=f"gated:{item.name}"))
    return c._worker(item, NodeKind.PREDICATE, next_id, end)


def _compile_choose(c: Compiler, item: ChooseItem, next_id: str) -> str:
    yes = c.sequence(item.if_true, next_id)
    no = c.sequence(item.if_false, next_id)
    return c._worker(item.step, NodeKind.PREDICATE, yes, no)


def _compile_loop(c: Compiler, item: LoopItem, next_id: str) -> str:
    """A PREDICATE whose true path runs the body and comes back to it."""
    body = c.sequence(item.body, item.step.name)
    return c._worker(item.step, NodeKind.PREDICATE, body, next_id)


def _compile_sleep(c: Compiler, item: SleepItem, next_id: str) -> str:
    return c._node(Node(id=item.name, kind=NodeKind.SLEEP, sleep_millis=item.millis, next=next_id))


def _compile_fork(c: Compiler, item: ForkItem, next_id: str) -> str:
    """The JOIN (with its combine step, if any), each branch leading to it, then the FORK."""
    join_id = item.join_name or (
        item.name.replace("fork", "join", 1) if item.name.startswith("fork") else f"{item.name}.join"
    )
    c._node(
        Node(
            id=join_id,
            kind=NodeKind.JOIN,
            fork=item.name,
            combine=item.combine is not None,
            queue=item.combine_queue,
            next=next_id,
        )
    )
    if item.combine is not None:
        c.handlers[join_id] = (HandlerKind.COMBINE, item.combine)
    firsts = tuple(c.sequence(b, join_id) for b in item.branches)
    return c._node(Node(id=item.name, kind=NodeKind.FORK, branches=firsts, join=join_id))


def _compile_for_each(c: Compiler, item: ForEachItem, next_id: str) -> str:
    """The JOIN, the body leading to it, then the FOR_EACH."""
    c._node(Node(id=item.join_name, kind=NodeKind.JOIN, fork=item.name, next=next_id))
    first = c.sequence(item.body, item.join_name)
    return c._node(
        Node(
            id=item.name,
            kind=NodeKind.FOR_EACH,
            items_key=item.items_key,
            branches=(first,),
            join=item.join_name,
            **item.keys,
        )
    )


def _path(c: Compiler, branch: Branch[Any] | None, next_id: str) -> str | None:
    """The first node of an optional path (an error or timeout path) that rejoins at ``next_id``."""
    return c.sequence(branch, next_id) if branch is not None else None


def _compile_sub_workflow(c: Compiler, item: SubWorkflowItem, next_id: str) -> str:
    alt_id = _path(c, item.on_error, next_id)
    return c._node(Node(id=item.name, kind=NodeKind.SUB_WORKFLOW, next=next_id, alt_next=alt_id, **item.spec))


def _compile_user_task(c: Compiler, item: UserTaskItem, next_id: str) -> str:
    alt = _path(c, item.on_timeout, next_id)
    return c._node(
        Node(
            id=item.name,
            kind=NodeKind.USER_TASK,
            timeout_millis=item.timeout_millis,
            alt_next=alt,
            next=next_id,
        )
    )


def _compile_signal(c: Compiler, item: SignalItem, next_id: str) -> str:
    alt = _path(c, item.on_timeout, next_id)
    return c._node(
        Node(
            id=item.name,
            kind=NodeKind.SIGNAL,
            signal=item.signal,
            timeout_millis=item.timeout_millis,
            alt_next=alt,
            result_key=item.key,
            next=next_id,
        )
    )


def _compile_end(c: Compiler, item: EndItem, next_id: str) -> str:
    n = sum(1 for node in c.nodes if node.kind is NodeKind.END)
    return c._node(Node(id=f"end.{n}", kind=NodeKind.END, reason=item.reason, success=item.success))


class ItemRule(NamedTuple):
    """How one item class compiles, and the node kinds it makes."""

    kinds: frozenset[NodeKind]
    compile: Callable[[Compiler, Any, str], str]


def _rule(compile: Callable[[Compiler, Any, str], str], *kinds: NodeKind) -> ItemRule:
    return ItemRule(frozenset(kinds), compile)


#: Each item class (by exact class: a GateItem is not compiled as a StepItem) and the node kinds
#: it makes. Every item class has a rule and every NodeKind is made by one: a test checks
#: (tests/engine/test_kind_tables.py).
ITEM_RULES: dict[type[Item], ItemRule] = {
    StepItem: _rule(_compile_step, NodeKind.TASK),
    GateItem: _rule(_compile_gate, NodeKind.PREDICATE, NodeKind.END),
    ChooseItem: _rule(_compile_choose, NodeKind.PREDICATE),
    LoopItem: _rule(_compile_loop, NodeKind.PREDICATE),
    SleepItem: _rule(_compile_sleep, NodeKind.SLEEP),
    ForkItem: _rule(_compile_fork, NodeKind.FORK, NodeKind.JOIN),
    ForEachItem: _rule(_compile_for_each, NodeKind.FOR_EACH, NodeKind.JOIN),
    SubWorkflowItem: _rule(_compile_sub_workflow, NodeKind.SUB_WORKFLOW),
    UserTaskItem: _rule(_compile_user_task, NodeKind.USER_TASK),
    SignalItem: _rule(_compile_signal, NodeKind.SIGNAL),
    EndItem: _rule(_compile_end, NodeKind.END),
}


class Blueprint(Generic[C]):
    """A compiled workflow: the definition the server keeps and the handlers a worker runs."""

    def __init__(
        self,
        definition: WorkflowDefinition,
        handlers: dict[str, tuple[str, Callable[..., Any]]],
        context_type: type[C],
    ) -> None:
        self.definition = definition
        self.handlers = handlers
        self.context_type = context_type
        self.version = definition.content_version()
        self.is_async = {node: inspect.iscoroutinefunction(fn) for node, (_, fn) in handlers.items()}

    @property
    def name(self) -> str:
        """The workflow name."""
        return self.definition.name

    def queues(self) -> set[str]:
        """Every queue this blueprint's worker steps run on."""
        nodes = self.definition.node_map()
        return {nodes[n].queue or self.name for n in self.handlers}

    def __repr__(self) -> str:
        return f"<Blueprint {self.name} version {self.version} ({len(self.definition.nodes)} nodes)>"


def registration_order(blueprints: Iterable[Blueprint[Any]]) -> list[Blueprint[Any]]:
    """``blueprints`` with each after the ones its sub-workflow nodes start, otherwise in the order
    given. The server refuses a parent whose child is not registered yet ("register it first"),
    so a worker given ``[parent, child]`` (or a set, in whatever order it iterates) failed to
    start; the worker and the test environment register in this order. Members of a cycle (two
    workflows starting each other) keep the order given among themselves."""
    given = list(blueprints)
    by_name: dict[str, list[int]] = {}
    for i, bp in enumerate(given):
        by_name.setdefault(bp.name, []).append(i)
    seen: set[int] = set()
    ordered: list[Blueprint[Any]] = []

    def place(i: int) -> None:
        seen.add(i)
        for node in given[i].definition.nodes:
            if node.kind is NodeKind.SUB_WORKFLOW and node.workflow:
                for j in by_name.get(node.workflow, ()):
                    if j not in seen:
                        place(j)
        ordered.append(given[i])

    for i in range(len(given)):
        if i not in seen:
            place(i)
    return ordered
