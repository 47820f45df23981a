"""The drain's figures, computed from the counters read at both edges of the timed window.

Pure functions of what the run measured (no processes, no I/O), so they are unit-tested alone
(tests/bench/test_figures.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wiggle import HistoryEntry, InstanceInfo

from .errors import BenchError

__all__ = [
    "DRIVER_RPCS",
    "Snapshot",
    "drain_figures",
    "latency_figures",
    "percentile",
    "start_figures",
    "step_gaps",
]

DRIVER_RPCS = ("ListInstances", "StartInstance", "StartInstances")  # the last: coalesced starts


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two pid -> CPU snapshots (a process new in ``after`` counts whole)."""
    return sum(max(cpu - before.get(pid, 0.0), 0.0) for pid, cpu in after.items())


@dataclass(frozen=True)
class Snapshot:
    """The counters read at one edge of the timed window."""

    stats: dict[str, Any]  # the server's "stats" event: RPC counters, store transactions
    cpu: dict[str, float | None]  # "server", "workers": CPU seconds (None: a process is gone)
    pg_cpu: tuple[dict[int, float], dict[int, float]] | None  # PostgreSQL (backends, background)
    driver_cpu: float
    machine: tuple[float, float] | None  # (busy, irq) CPU seconds of the whole machine


def drain_figures(
    infos: Sequence[InstanceInfo],
    *,
    steps: int,
    t_go: float,
    observed: float,
    polls: int,
    before: Snapshot,
    after: Snapshot,
    worker_stats: Sequence[dict[str, Any]],
    pg_counters: Mapping[str, int] | None,
) -> dict[str, Any]:
    """The figures of a verified drain of ``infos`` (every instance finished) timed from ``t_go``.

    ``t_go`` is wall-clock seconds; the window ends at the last ``finished_at`` (milliseconds, the
    server's clock). ``observed`` is the driver's own view of the window, ``polls`` its
    ListInstances calls, ``pg_counters`` PostgreSQL's database counters over the drain server's
    life (pgstats.COUNTERS: committed transactions, rows; None in memory).
    """
    n = len(infos)
    last_finish = max(i.finished_at for i in infos) / 1000
    elapsed = last_finish - t_go
    if elapsed <= 0:
        raise BenchError(
            f"the last instance finished {-elapsed:.3f} s before the drain began: clocks disagree"
        )
    latencies = [i.finished_at - i.created_at for i in infos]
    rpc, errors = _rpc_deltas(before, after)
    tx = after.stats["transactions"] - before.stats["transactions"]
    handed = after.stats.get("handed_off", 0) - before.stats.get("handed_off", 0)
    chained = after.stats.get("chained", 0) - before.stats.get("chained", 0)
    cpu = _cpu_deltas(before, after)
    total_cpu = cpu.pop("_total") or 0.0
    executed = sum(s.get("steps", 0) for s in worker_stats)
    worker_calls = _summed(worker_stats, "calls")
    handbacks = _summed(worker_stats, "handbacks")
    # The driver's own calls (its ListInstances polls; its starts under --submit during) are not
    # the workers' cost of running an instance.
    worker_rpcs = sum(v for m, v in rpc.items() if m not in DRIVER_RPCS)
    xact = None if pg_counters is None else pg_counters.get("xact_commit", 0)
    return {
        "instances": n,
        "steps": steps,
        "elapsed_s": round(elapsed, 3),
        "observed_s": round(observed, 3),
        "instances_per_s": round(n / elapsed, 1),
        "steps_per_s": round(n * steps / elapsed, 1),
        "latency_ms": {
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "max": max(latencies),
        },
        "rpc_total": rpc,
        "rpc_per_instance": {m: round(v / n, 3) for m, v in rpc.items()},
        "worker_rpcs_per_instance": round(worker_rpcs / n, 3),
        "driver_list_calls": polls,
        "rpc_errors": errors,
        "store_transactions": tx,
        "store_tx_per_instance": round(tx / n, 3),
        # steps leased to a waiting poller by the commit that made them READY (no claim)
        "handed_off_per_instance": round(handed / n, 3),
        # steps leased to the reporting worker in its report's commit (no poll, no claim)
        "chained_per_instance": round(chained / n, 3),
        "pg_xact_commit": xact,
        "pg_xact_per_instance": None if xact is None else round(xact / n, 3),
        "pg_per_instance": None
        if pg_counters is None
        else {k: round(v / n, 3) for k, v in pg_counters.items()},
        # the servers' claims, empty claims, NOTIFYs sent and heard (worker.py's StoreProbe)
        "store_per_instance": {k: round(v / n, 3) for k, v in _store_deltas(before, after).items()},
        "cpu_s": cpu,
        "cpu_total_s": round(total_cpu, 3),
        "cpu_ms_per_instance": round(total_cpu * 1000 / n, 2),
        "handler_executions": executed,
        "worker_calls": worker_calls,
        "handbacks": handbacks,
    }


def _rpc_deltas(before: Snapshot, after: Snapshot) -> tuple[dict[str, int], dict[str, int]]:
    """The server's calls and errors per RPC inside the window (RPCs with none left out)."""
    calls0 = before.stats["metrics"]["rpc_calls"]
    calls1 = after.stats["metrics"]["rpc_calls"]
    rpc = {m: calls1.get(m, 0) - calls0.get(m, 0) for m in sorted(set(calls1) | set(calls0))}
    err0 = before.stats["metrics"].get("rpc_errors", {})
    err1 = after.stats["metrics"].get("rpc_errors", {})
    errors = {m: err1.get(m, 0) - err0.get(m, 0) for m in err1 if err1.get(m, 0) - err0.get(m, 0)}
    return {m: v for m, v in rpc.items() if v}, errors


def _store_deltas(before: Snapshot, after: Snapshot) -> dict[str, int]:
    """The store probe's counts inside the window (worker.py's StoreProbe; {} from an older server)."""
    s0 = before.stats.get("store", {})
    s1 = after.stats.get("store", {})
    return {k: v - s0.get(k, 0) for k, v in s1.items()}


def _cpu_deltas(before: Snapshot, after: Snapshot) -> dict[str, float | None]:
    """CPU seconds per role inside the window; "_total" is the sum of the roles measured."""
    cpu: dict[str, float | None] = {}
    for role in ("server", "workers"):
        a, b = before.cpu.get(role), after.cpu.get(role)
        cpu[role] = None if a is None or b is None else round(b - a, 3)
    if before.pg_cpu is not None and after.pg_cpu is not None:
        cpu["postgres_backends"] = round(cpu_delta(before.pg_cpu[0], after.pg_cpu[0]), 3)
        cpu["postgres_background"] = round(cpu_delta(before.pg_cpu[1], after.pg_cpu[1]), 3)
    cpu["driver"] = round(after.driver_cpu - before.driver_cpu, 3)
    total_cpu = sum(v for v in cpu.values() if v is not None)
    if before.machine is not None and after.machine is not None:
        # The kernel's interrupt work (loopback networking lands partly here), and every
        # other process meanwhile: contention from other work on the machine shows there.
        busy, irq = after.machine[0] - before.machine[0], after.machine[1] - before.machine[1]
        cpu["irq"] = round(irq, 3)
        cpu["other"] = round(max(busy - irq - total_cpu, 0.0), 3)
    cpu["_total"] = total_cpu
    return cpu


def _summed(worker_stats: Sequence[dict[str, Any]], key: str) -> dict[str, int]:
    """The workers' per-name counters under ``key``, added up."""
    out: dict[str, int] = {}
    for s in worker_stats:
        for k, v in s.get(key, {}).items():
            out[k] = out.get(k, 0) + v
    return out


def start_figures(
    latencies: Sequence[float], span: float, clients: str, behind: Sequence[float] = ()
) -> dict[str, Any]:
    """Starts/s over ``span`` (first start issued -> last returned, seconds) and the per-call
    latency percentiles in milliseconds of ``latencies`` (seconds); ``clients`` says who called.
    Paced starts (``behind``: seconds each was issued after its due time) add ``behind_ms``, its
    p50 and max: a pace the threads could not keep shows there."""
    ms = [x * 1000 for x in latencies]
    figures = {
        "count": len(ms),
        "clients": clients,
        "span_s": round(span, 3),
        "per_s": round(len(ms) / span, 1) if span > 0 else None,
        "latency_ms": {
            "p50": round(percentile(ms, 50), 2),
            "p90": round(percentile(ms, 90), 2),
            "p99": round(percentile(ms, 99), 2),
            "max": round(max(ms), 2) if ms else float("nan"),
        },
    }
    if behind:
        late = [x * 1000 for x in behind]
        figures["behind_ms"] = {"p50": round(percentile(late, 50), 2), "max": round(max(late), 2)}
    return figures


def step_gaps(history: Sequence[HistoryEntry]) -> list[tuple[int, str, str]]:
    """The gaps between consecutive TASK steps of one instance: (ms, previous node, next node).

    A gap runs from a step's ``ended_at`` (its report, applied by the server) to the next step's
    ``started_at`` (its claim): the time the instance waited between two steps. The history's
    timestamps are the server's clock in milliseconds.
    """
    tasks = sorted((h for h in history if h.kind == "TASK"), key=lambda h: (h.started_at, h.ended_at))
    return [(b.started_at - a.ended_at, a.node_id, b.node_id) for a, b in zip(tasks, tasks[1:], strict=False)]


def latency_figures(
    latencies: Sequence[float],
    histories: Mapping[str, Sequence[HistoryEntry]],
    elapsed: float,
    gap_limit: int,
    rpc_latencies: Sequence[float] = (),
) -> dict[str, Any]:
    """The latency mode's figures: start -> result percentiles (``latencies`` in seconds, one per
    instance) and the gaps between consecutive steps from ``histories`` (instance id -> history);
    ``gap_limit`` ms is the line an instance's largest gap is counted against. ``rpc_latencies``
    (seconds) are the run's yardstick, a trivial unary RPC timed after each instance: its p50, and
    the instances' p50 as a multiple of it (``None`` without it)."""
    ms = [x * 1000 for x in latencies]
    rpc_p50 = round(percentile([x * 1000 for x in rpc_latencies], 50), 3) if rpc_latencies else None
    worst: dict[str, Any] = {}
    largest: list[int] = []  # each instance's largest gap
    every: list[int] = []
    for instance_id, history in histories.items():
        gaps = step_gaps(history)
        every.extend(g for g, _, _ in gaps)
        if not gaps:
            continue
        gap, after, before = max(gaps)
        largest.append(gap)
        if not worst or gap > worst["ms"]:
            worst = {"ms": gap, "instance_id": instance_id, "after": after, "before": before}
    return {
        "instances": len(ms),
        "elapsed_s": round(elapsed, 3),
        "latency_ms": {
            "p50": round(percentile(ms, 50), 2),
            "p90": round(percentile(ms, 90), 2),
            "p99": round(percentile(ms, 99), 2),
            "max": round(max(ms), 2) if ms else float("nan"),
        },
        "gap_ms": {
            "p50": percentile(every, 50) if every else None,
            "p99": percentile(every, 99) if every else None,
            "max": max(every) if every else None,
        },
        "rpc_p50_ms": rpc_p50,
        "p50_in_rpcs": round(percentile(ms, 50) / rpc_p50, 1) if rpc_p50 else None,
        "gap_limit_ms": gap_limit,
        "instances_over_gap_limit": sum(1 for g in largest if g > gap_limit),
        "worst_gap": worst or None,
    }
