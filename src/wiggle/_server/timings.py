"""Server histograms and outcome counters, fed by the instance layer (exported by metrics_http).

Step schedule-to-start (READY and due → claimed) and run time (claimed → reported, from the
history entries a transition writes) per workflow and queue; instance outcomes per workflow and
status; the latency of a store mutation (lock, load, transition, persist, commit) per operation.
Plain counters: prometheus-client is needed only to export them.
"""

from __future__ import annotations

from collections import Counter

from .._engine.engine import LoadedDefinition
from .._engine.state import Changes, InstanceState, Token
from .._histogram import Histogram

__all__ = ["Timings", "STEP_BUCKETS", "STORE_BUCKETS"]

STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
_WORKER_KINDS = frozenset({"TASK", "PREDICATE"})
_REPORTED = frozenset({"COMPLETED", "RETRY", "FAILED"})


class Timings:
    """Everything the instance layer observes for /metrics."""

    def __init__(self) -> None:
        self.schedule_to_start = Histogram(STEP_BUCKETS)  # (workflow, queue)
        self.run_time = Histogram(STEP_BUCKETS)  # (workflow, queue)
        self.mutation = Histogram(STORE_BUCKETS)  # (operation,)
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (workflow, status)

    def claimed(self, loaded: LoadedDefinition, token: Token, now: int) -> None:
        """A due READY token is being claimed at ``now``: how long it waited."""
        waited = max(now - token.available_at, 0) if token.available_at else 0
        self.schedule_to_start.observe((loaded.definition.name, token.queue), waited / 1000)

    def changed(self, loaded: LoadedDefinition, state: InstanceState, changes: Changes | None) -> None:
        """A transition's changes: the step attempts it reported, the outcome if it finished."""
        if changes is None:
            return
        workflow = state.instance.workflow
        for entry in changes.history:
            if entry.kind in _WORKER_KINDS and entry.outcome in _REPORTED and entry.started_at:
                node = loaded.nodes.get(entry.node_id)
                queue = loaded.queue_of(node) if node is not None else ""
                self.run_time.observe((workflow, queue), max(entry.ended_at - entry.started_at, 0) / 1000)
        if changes.finished:
            self.outcomes[(workflow, str(state.instance.status))] += 1
