"""What the engine runs with: the server-wide rules and a registered definition, compiled."""

from __future__ import annotations

import msgspec

from .. import _fast
from .._model import ExecutionMode, Node, WorkflowDefinition

__all__ = ["EngineConfig", "LoadedDefinition"]


class EngineConfig(msgspec.Struct):
    """Server-wide rules the engine applies (all from WIGGLE_* settings)."""

    lease_millis: int = 30_000  # a claim's lease, unless the claim asks for another length
    # the longest lease a claim or heartbeat may ask for (the upstream protocol's lease lengths;
    # docs/semantics.md#leases); the shortest is MIN_LEASE_MILLIS (wiggle/_engine/engine.py)
    max_lease_millis: int = 600_000
    execution_mode: ExecutionMode = ExecutionMode.SERVER  # what DEFAULT resolves to
    max_local_steps: int = 1000  # server cap on one local run (0: none); a definition may lower it
    max_payload_bytes: int = 1 << 20  # context, step result, user-task payload
    max_instance_steps: int = 100_000  # runaway guard: worker steps one instance may take
    max_drive_moves: int = 10_000  # runaway guard: server-side moves in one drive
    release_delay_millis: int = 200  # a released step waits this long before the next claim
    max_sub_workflow_depth: int = 10  # children of children: the deepest a child may be
    child_recheck_millis: int = 30_000  # a waiting parent re-reads its child this often (safety net)
    # A fork's join keeps each branch's changes, not its whole context (JoinState.diffs): off until
    # every server of a cluster runs a release that folds both (docs/upgrading.md#compact-joins).
    join_diffs: bool = False


class LoadedDefinition:
    """A registered definition with its compiled graph, cached by the store."""

    __slots__ = ("definition", "version", "graph", "nodes", "json")

    def __init__(self, definition: WorkflowDefinition, version: str | None = None) -> None:
        self.definition = definition
        self.version = version or definition.content_version()
        self.graph = _fast.CompiledGraph(definition)
        self.nodes: dict[str, Node] = definition.node_map()
        self.json = definition.to_json()

    def queue_of(self, node: Node) -> str:
        """The queue a worker node (or a join's combine call) runs on."""
        return node.queue or self.definition.name
