"""Compile a workflow's item tree into definition nodes and its handler table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._model import Node, NodeKind
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
    from .workflow import Branch

__all__ = ["Compiler", "HandlerKind"]


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
            )
        )

    def sequence(self, branch: Branch[Any], next_id: str) -> str:
        current = next_id
        for item in reversed(self.items_of(branch)):
            current = self.item(item, current)
        return current

    def item(self, item: Item, next_id: str) -> str:
        if isinstance(item, GateItem):
            end = self._node(Node(id=f"gated.{item.name}", kind=NodeKind.END, reason=f"gated:{item.name}"))
            return self._worker(item, NodeKind.PREDICATE, next_id, end)
        if isinstance(item, StepItem):
            return self._worker(item, NodeKind.TASK, next_id, None)
        if isinstance(item, ChooseItem):
            yes = self.sequence(item.if_true, next_id)
            no = self.sequence(item.if_false, next_id)
            return self._worker(item.step, NodeKind.PREDICATE, yes, no)
        if isinstance(item, LoopItem):
            body = self.sequence(item.body, item.step.name)
            return self._worker(item.step, NodeKind.PREDICATE, body, next_id)
        if isinstance(item, SleepItem):
            return self._node(Node(id=item.name, kind=NodeKind.SLEEP, sleep_millis=item.millis, next=next_id))
        if isinstance(item, ForkItem):
            join_id = item.join_name or (
                item.name.replace("fork", "join", 1) if item.name.startswith("fork") else f"{item.name}.join"
            )
            self._node(
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
                self.handlers[join_id] = (HandlerKind.COMBINE, item.combine)
            firsts = tuple(self.sequence(b, join_id) for b in item.branches)
            return self._node(Node(id=item.name, kind=NodeKind.FORK, branches=firsts, join=join_id))
        if isinstance(item, ForEachItem):
            self._node(Node(id=item.join_name, kind=NodeKind.JOIN, fork=item.name, next=next_id))
            first = self.sequence(item.body, item.join_name)
            return self._node(
                Node(
                    id=item.name,
                    kind=NodeKind.FOR_EACH,
                    items_key=item.items_key,
                    branches=(first,),
                    join=item.join_name,
                    **item.keys,
                )
            )
        if isinstance(item, SubWorkflowItem):
            alt_id = self.sequence(item.on_error, next_id) if item.on_error is not None else None
            return self._node(
                Node(id=item.name, kind=NodeKind.SUB_WORKFLOW, next=next_id, alt_next=alt_id, **item.spec)
            )
        if isinstance(item, UserTaskItem):
            alt = self.sequence(item.on_timeout, next_id) if item.on_timeout is not None else None
            return self._node(
                Node(
                    id=item.name,
                    kind=NodeKind.USER_TASK,
                    timeout_millis=item.timeout_millis,
                    alt_next=alt,
                    next=next_id,
                )
            )
        if isinstance(item, SignalItem):
            alt = self.sequence(item.on_timeout, next_id) if item.on_timeout is not None else None
            return self._node(
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
        if isinstance(item, EndItem):
            n = sum(1 for node in self.nodes if node.kind is NodeKind.END)
            return self._node(
                Node(id=f"end.{n}", kind=NodeKind.END, reason=item.reason, success=item.success)
            )
        raise AssertionError(item)  # pragma: no cover
