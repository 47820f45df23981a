"""Server histograms and counters, fed by the instance layer (exported by metrics_http).

Everything here is counted from what a transition *committed*: ``Instances.mutate``
(wiggle/_server/instances.py) hands each committed ``Changes`` to ``committed`` once, and the
inserts of new instances (client starts, sub-workflow children, schedule ticks) go to
``inserted``. The history entries a transition writes are the one source of the step figures, so
every path that moves a step (a worker's report, AdvanceRun's batches, the clock duties, upstream
Wiggle's RPCs, a revocation) is counted the same way:

- step attempts by workflow, node and outcome (``STEP_OUTCOMES``), with their duration;
- retries (an attempt followed by another), final step failures;
- step schedule-to-start (READY and due -> claimed) and run time per workflow and queue;
- instances started per workflow and source, finished per workflow and status;
- schedule ticks per workflow and outcome; the latency of a store mutation per operation.

Plain counters: prometheus-client is needed only to export them. The log lines of a final
failure and of an operator action are written from here too (failures.py, operator.py), after
the commit, so a transition the store ran twice or rolled back logs nothing twice or wrongly.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable

from .._engine.engine import LoadedDefinition
from .._engine.state import Changes, HistoryEntry, InstanceState, InstanceStatus, Token
from .._histogram import Histogram, Series
from .failures import log_final_failure
from .operator import OPERATOR_KIND, log_recorded_actions

__all__ = ["Timings", "STEP_BUCKETS", "STORE_BUCKETS", "STEP_OUTCOMES", "step_outcome", "SOURCES"]

STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
_WORKER_KINDS = frozenset({"TASK", "PREDICATE"})
_REPORTED = frozenset({"COMPLETED", "RETRY", "FAILED"})
#: the node kinds whose history entries are step attempts (a worker's, a person's, a child's)
_STEP_KINDS = frozenset({"TASK", "PREDICATE", "USER_TASK", "SIGNAL", "SUB_WORKFLOW"})
#: The values of the ``outcome`` label of the step families (docs/metrics.md).
STEP_OUTCOMES = ("completed", "retry", "failed", "timed_out", "lease_expired", "released")
#: The values of the ``source`` label of wiggle_instances_started_total.
SOURCES = ("client", "schedule", "sub_workflow")
_BY_OUTCOME = {
    "COMPLETED": "completed",
    "SIGNALLED": "completed",  # a signal wait that got its signal
    "RETRY": "retry",
    "FAILED": "failed",
    "TIMED_OUT": "timed_out",  # a user task's, a signal wait's or the workflow's deadline
    "RELEASED": "released",  # taken back from a revoked worker (wiggle/_server/revocation.py)
}
# The reasons the clock gives an attempt whose lease ran out (wiggle/_engine/clock.py expiry_reason)
_TIMEOUT_PREFIXES = ("timed out after", "heartbeat timed out")
_EXPIRED_PREFIX = "lease expired"


def step_outcome(entry: HistoryEntry) -> str | None:
    """The ``outcome`` label of a step attempt's history entry, or None if it is no step attempt.

    An attempt the clock ended (its start-to-close limit, its heartbeat timeout, its worker gone)
    is ``timed_out`` or ``lease_expired`` whether or not a retry follows; the retry is counted by
    wiggle_step_retries_total.
    """
    if entry.kind not in _STEP_KINDS:
        return None
    # a HistoryOutcome or its str (loaded back): equal, and hashed alike as each name is its value
    outcome = _BY_OUTCOME.get(entry.outcome)
    if outcome == "retry" or outcome == "failed":
        error = entry.error
        if error.startswith(_TIMEOUT_PREFIXES):
            return "timed_out"
        if error.startswith(_EXPIRED_PREFIX):
            return "lease_expired"
    return outcome


def _observe(series: Series, seconds: float) -> None:
    """Series.observe, for a duration that may be 0 (every step of a local run's batch after its
    first has one: wiggle/_engine/local_runs.py)."""
    if seconds > 0:
        series.counts[bisect_left(series.buckets, seconds)] += 1
        series.sum += seconds
    else:
        series.counts[series.zero] += 1


class _Step:
    """One (workflow, node, outcome)'s figures."""

    __slots__ = ("attempts", "duration")

    def __init__(self, duration: Series) -> None:
        self.attempts = 0
        self.duration = duration


class Timings:
    """Everything the instance layer observes for /metrics.

    Called on every claim and every transition, so each keeps the ``Series`` of the labels it
    observes (by workflow name, then queue or definition version and node) and updates it in place,
    instead of building a label tuple and looking it up per step.
    """

    def __init__(self) -> None:
        self.schedule_to_start = Histogram(STEP_BUCKETS)  # (workflow, queue)
        self.run_time = Histogram(STEP_BUCKETS)  # (workflow, queue)
        self.mutation = Histogram(STORE_BUCKETS)  # (operation,)
        self.step_duration = Histogram(STEP_BUCKETS)  # (workflow, node, outcome)
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (workflow, status)
        self.started: Counter[tuple[str, str]] = Counter()  # (workflow, source)
        self.retries: Counter[tuple[str, str]] = Counter()  # (workflow, node)
        self.step_failures: Counter[tuple[str, str]] = Counter()  # (workflow, node)
        self.schedule_ticks: Counter[tuple[str, str]] = Counter()  # (workflow, outcome)
        self.mutate_seconds = self.mutation.labels(("mutate",))
        # workflow -> queue -> its schedule-to-start series
        self._waits: dict[str, dict[str, Series]] = {}
        # workflow -> definition version -> node -> its run-time series (a node's queue may differ
        # between versions)
        self._runs: dict[str, dict[str, dict[str, Series]]] = {}
        self._steps: dict[tuple[str, str, str], _Step] = {}

    def claimed(self, loaded: LoadedDefinition, token: Token, now: int) -> None:
        """A due READY token is being claimed at ``now``: how long it waited."""
        available = token.available_at
        waited = now - available if available and now > available else 0
        name = loaded.definition.name
        by_queue = self._waits.get(name)
        if by_queue is None:
            by_queue = self._waits[name] = {}
        series = by_queue.get(token.queue)
        if series is None:
            series = by_queue[token.queue] = self.schedule_to_start.labels((name, token.queue))
        seconds = waited / 1000  # Series.observe written out (once per claimed step)
        series.counts[bisect_left(series.buckets, seconds)] += 1
        series.sum += seconds

    def committed(self, loaded: LoadedDefinition | None, state: InstanceState, changes: Changes) -> None:
        """A transition's committed changes: its step attempts, the instance's end, the log lines."""
        history = changes.history
        if history and self._steps_of(loaded, state.instance.workflow, history):
            log_recorded_actions(state, history)
        if changes.finished:
            status = str(state.instance.status)
            self.outcomes[(state.instance.workflow, status)] += 1
            if status == InstanceStatus.FAILED:
                log_final_failure(state, history)

    def inserted(
        self, loaded: LoadedDefinition | None, state: InstanceState, changes: Changes, source: str
    ) -> None:
        """A new instance was stored (``source``: one of ``SOURCES``), with what its start did."""
        self.started[(state.instance.workflow, source)] += 1
        self.committed(loaded, state, changes)

    def ticks(self, workflow: str, outcome: str, n: int = 1) -> None:
        """``n`` ticks of a schedule of ``workflow`` ended as ``outcome`` (fired, skipped, ...)."""
        if n > 0:
            self.schedule_ticks[(workflow, outcome)] += n

    def step_series(self) -> Iterable[tuple[tuple[str, str, str], _Step]]:
        """((workflow, node, outcome), its figures), sorted."""
        for labels in sorted(self._steps):
            yield labels, self._steps[labels]

    def _steps_of(self, loaded: LoadedDefinition | None, workflow: str, history: list[HistoryEntry]) -> bool:
        """Count the step attempts of ``history`` (one pass: attempts, durations, retries, failures,
        and the run time of a worker's reported step); whether it holds an operator's entry."""
        steps = self._steps
        operator = False
        nodes: dict[str, Series] | None = None
        for entry in history:
            kind = entry.kind
            if kind not in _STEP_KINDS:
                operator = operator or kind == OPERATOR_KIND
                continue
            raw = entry.outcome
            outcome = _BY_OUTCOME.get(raw)
            if outcome is None:
                continue
            if outcome == "retry" or outcome == "failed":
                outcome = step_outcome(entry) or outcome  # the clock's timeouts and lease expiries
            node = entry.node_id
            key = (workflow, node, outcome)
            step = steps.get(key)
            if step is None:
                step = steps[key] = _Step(self.step_duration.labels(key))
            step.attempts += 1
            started = entry.started_at
            seconds = (entry.ended_at - started) / 1000 if started else 0.0
            _observe(step.duration, seconds)
            if loaded is not None and started and kind in _WORKER_KINDS and raw in _REPORTED:
                if nodes is None:
                    nodes = self._run_series(workflow, loaded)
                series = nodes.get(node)
                if series is None:
                    series = nodes[node] = self._run_time_series(workflow, loaded, node)
                _observe(series, seconds)
            if outcome == "completed":
                continue
            if raw == "RETRY":
                self.retries[(workflow, node)] += 1
            elif raw == "FAILED" or (raw == "TIMED_OUT" and entry.error):
                self.step_failures[(workflow, node)] += 1  # TIMED_OUT with an error failed the instance
        return operator

    def _run_time_series(self, workflow: str, loaded: LoadedDefinition, node_id: str) -> Series:
        node = loaded.nodes.get(node_id)
        queue = loaded.queue_of(node) if node is not None else ""
        return self.run_time.labels((workflow, queue))

    def _run_series(self, workflow: str, loaded: LoadedDefinition) -> dict[str, Series]:
        by_version = self._runs.get(workflow)
        if by_version is None:
            by_version = self._runs[workflow] = {}
        nodes = by_version.get(loaded.version)
        if nodes is None:
            nodes = by_version[loaded.version] = {}
        return nodes
