"""The worker's insides, one job per module; ``wiggle.worker`` is the public face.

- ``options``: WorkerOptions and their validation (WIGGLE_* defaults read through ``wiggle._env``).
- ``transport``: the typed ``Transport`` protocol and the unary implementation; ``stream``: the
  multiplexed WorkerSession implementation.
- ``reporter``: sending reports (retry while the server is away, drop a refusal).
- ``handlers``: calling handlers (sync or async, typed contexts), the inline policy, outcomes.
- ``records``: the one function that builds an AdvanceRun step record.
- ``server_step``: SERVER style, one step reported with CompleteTask or FailTask.
- ``local_run``: the LOCAL_SYNC / LOCAL_ASYNC driver and its ``Decision``.
- ``stats``: WorkerStats, the counters tests and the benchmark read.
- ``heartbeats``: one loop that renews the lease of every in-flight step.
- ``poller``: the pull loop.
- ``worker``: the ``Worker`` that wires them together.
"""
