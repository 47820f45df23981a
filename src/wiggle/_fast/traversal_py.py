"""Graph traversal, the pure-Python reference twin of traversal_c.pyx.

The one place that decides, for a worker step, what runs next and whether a worker may run it
locally. The server's drive loop and the worker's local driver both call it, so the two can
never disagree.
"""

from __future__ import annotations

from collections.abc import Collection

from .._model import Handback, NodeKind, WorkflowDefinition

__all__ = ["CompiledGraph"]

# Kind codes of CompiledGraph.kinds (the Cython twin keeps them in a C int array).
TASK, PREDICATE, SLEEP, FORK, JOIN, USER_TASK, END = range(7)
SIGNAL, SUB_WORKFLOW, FOR_EACH = 7, 8, 9
_KIND_CODE = {
    NodeKind.TASK: TASK,
    NodeKind.PREDICATE: PREDICATE,
    NodeKind.SLEEP: SLEEP,
    NodeKind.FORK: FORK,
    NodeKind.JOIN: JOIN,
    NodeKind.USER_TASK: USER_TASK,
    NodeKind.END: END,
    NodeKind.SIGNAL: SIGNAL,
    NodeKind.SUB_WORKFLOW: SUB_WORKFLOW,
    NodeKind.FOR_EACH: FOR_EACH,
}
_BOUNDARY = {
    SLEEP: Handback.SLEEP,
    FORK: Handback.FORK,
    JOIN: Handback.JOIN,
    USER_TASK: Handback.USER_TASK,
    END: Handback.TERMINAL,
    SIGNAL: Handback.SIGNAL,
    SUB_WORKFLOW: Handback.SUB_WORKFLOW,
    FOR_EACH: Handback.FOR_EACH,
}


class CompiledGraph:
    """A definition's graph as flat arrays indexed by node number, for fast repeated walks.

    ``kinds[i]`` is a kind code, ``nexts[i]``/``alts[i]`` successor indexes (-1: none),
    ``queues[i]`` the resolved queue of a worker step (the workflow name by default; "" for a
    step with a concurrency or rate limit, handed back), and
    ``checkpoints[i]`` whether a LOCAL_ASYNC run must flush after node ``i``.
    """

    __slots__ = ("ids", "index", "kinds", "nexts", "alts", "queues", "checkpoints")

    def __init__(self, definition: WorkflowDefinition) -> None:
        self.ids: list[str] = [n.id for n in definition.nodes]
        self.index: dict[str, int] = {node_id: i for i, node_id in enumerate(self.ids)}
        self.kinds: list[int] = [_KIND_CODE[n.kind] for n in definition.nodes]
        self.nexts: list[int] = [self.index[n.next] if n.next is not None else -1 for n in definition.nodes]
        self.alts: list[int] = [
            self.index[n.alt_next] if n.alt_next is not None else -1 for n in definition.nodes
        ]
        # A step with a concurrency or rate limit runs only under a claim of its own: "" (no queue a
        # worker serves) makes a local run hand it back (docs/flow-control.md#concurrency-limits).
        self.queues: list[str] = [
            "" if n.limit is not None or n.rate is not None else (n.queue or definition.name)
            for n in definition.nodes
        ]
        marks = set(definition.checkpoints)
        self.checkpoints: list[bool] = [n.id in marks for n in definition.nodes]

    def successor(self, node_id: str, predicate_value: bool = True) -> str | None:
        """The node after the worker step ``node_id``: a task's ``next``; a predicate's ``next`` or ``alt_next``."""
        i = self.index[node_id]
        j = self.alts[i] if self.kinds[i] == PREDICATE and not predicate_value else self.nexts[i]
        return self.ids[j] if j >= 0 else None

    def classify(self, node_id: str, queues: Collection[str]) -> Handback | None:
        """Why a worker serving ``queues`` must hand back at ``node_id``; None to run it locally."""
        i = self.index[node_id]
        kind = self.kinds[i]
        if kind == TASK or kind == PREDICATE:
            return None if self.queues[i] in queues else Handback.OTHER_QUEUE
        return _BOUNDARY[kind]

    def is_checkpoint(self, node_id: str) -> bool:
        """True if a LOCAL_ASYNC run must flush right after ``node_id``."""
        return self.checkpoints[self.index[node_id]]
