"""What a store tells an operator: instance counts, queue depths, readiness, cluster nodes.

Reads only, for the dashboard, the queue-lag monitor and /readyz (issue #13); each store answers
them from what it has (wiggle/_storage/memory.py, wiggle/_storage/postgres/ops.py).
"""

from __future__ import annotations

import msgspec

__all__ = ["QueueStat", "NodeInfo", "Readiness"]


class QueueStat(msgspec.Struct, kw_only=True):
    """One queue right now: its READY tokens (due and delayed) and its leased ones."""

    queue: str
    ready: int = 0  # READY and due: waiting for a worker
    delayed: int = 0  # READY with a future available_at (a retry backoff)
    oldest_ready_at: int = 0  # the earliest available_at among the due READY tokens (0: none)
    running: int = 0  # leased to a worker (SERVER steps and local runs)
    in_local_run: int = 0  # of ``running``: tokens a worker drives in a local run
    in_flight: dict[str, int] = {}  # lease owner (worker id) -> tokens it holds on this queue
    # concurrency limits (docs/flow-control.md#concurrency-limits): of ``running``, the attempts
    # counted against a limit key; of ``ready``, the steps waiting because their key is at its
    # limit (queued behind it)
    limit_held: int = 0
    limit_waiting: int = 0
    # the queue's own limits (wiggle/_storage/queue_limits.py; 0: none), and until when (ms) its
    # rate limit holds its due steps back (0: it does not now)
    max_running: int = 0
    rate_max: int = 0
    rate_period_millis: int = 0
    rate_limited_until: int = 0
    # per-key rate limits of steps (docs/flow-control.md#per-key-rate-limits): of ``ready``, the
    # steps waiting for their key's rate, and the first moment (ms) one of them may go (0: none)
    rate_waiting: int = 0
    rate_waiting_until: int = 0


class NodeInfo(msgspec.Struct, kw_only=True):
    """One server node of a cluster (PostgreSQL), or the only one (memory)."""

    node_id: str
    this_node: bool
    clock_leader: bool
    connected_since: int = 0  # ms
    last_seen: int = 0  # ms: the node's last activity the database saw
    address: str = ""


class Readiness(msgspec.Struct, kw_only=True):
    """Whether the store can serve: reachable and (PostgreSQL) the schema migrations current."""

    ready: bool
    detail: str
    schema_version: int = 0
    expected_version: int = 0
