"""The steps each worker said it cannot run, so its claims pass them over.

A worker without a handler for a step's node gives the step back (FailTask with ``release``,
wiggle/_worker/server_step.py ``release_step``; docs/semantics.md#mixed-fleets). Before this
registry, the same worker claimed that step again on its next poll and gave it back again: with
no worker that had the handler, every worker that lacked it claimed and gave back the new steps
as fast as it polled (2,000 waiting steps kept an in-memory server 65% busy; bench/README.md,
"Round thirty-seven"). Now a give-back notes (workflow, version, node) against the worker's id,
and that worker's claims, polls and chained steps pass the node over (``Delivery``), for
``HOLD_SECONDS``, after which it is offered the node again once.

A worker restarted under the same explicit id, now with the handler, is not held: each worker
process stamps its polls with a session of its own (``PollTasksRequest.worker_session``,
wiggle/_worker/poller.py), and a poll whose stamp is not the id's last one ends that id's holds
(``seen``). A worker that sends no stamp (an older one) waits out the hold, as before.

Per server process, in memory: nothing here is durable or shared between the servers of a
cluster (a worker gives a node back once to each server it polls).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from .._storage.base import NOTHING_SKIPPED, Skip

__all__ = ["Unrunnable"]


class Unrunnable:
    """Per worker id, the nodes it gave back for lack of a handler, each until its hold ends."""

    #: How long a worker is not offered a node it gave back (seconds). Short, so that a worker
    #: that sends no session stamp and is restarted under the same id with the handler waits
    #: little for the node; long enough that what a worker without it gives back is a batch of its first claim every
    #: HOLD_SECONDS (bench/give_backs.py), not one step per poll.
    HOLD_SECONDS = 10.0
    #: Bounds: the workers remembered (the least recently noted go first) and the nodes each.
    MAX_WORKERS = 10_000
    MAX_NODES = 256

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._by_worker: OrderedDict[str, dict[tuple[str, str, str], float]] = OrderedDict()
        self._sessions: OrderedDict[str, str] = OrderedDict()  # worker id -> its last poll's stamp
        self._queues: dict[tuple[str, str, str], str] = {}  # (workflow, version, node) -> its queue
        self.noted = 0  # give-backs noted (wiggle_steps_given_back_no_handler, metrics_http.py)

    def note(self, worker_id: str, workflow: str, version: str, node: str, queue: str = "") -> None:
        """``worker_id`` gave back a step of ``node`` of (``workflow``, ``version``): it has no
        handler. ``queue``: the step's queue, where the hold is shown (``holds``)."""
        if not worker_id:
            return
        by_worker = self._by_worker
        nodes = by_worker.get(worker_id)
        if nodes is None:
            while len(by_worker) >= self.MAX_WORKERS:
                by_worker.popitem(last=False)
            nodes = by_worker[worker_id] = {}
        else:
            by_worker.move_to_end(worker_id)
        key = (workflow, version, node)
        nodes.pop(key, None)
        while len(nodes) >= self.MAX_NODES:
            del nodes[next(iter(nodes))]  # the longest held
        nodes[key] = self.clock() + self.HOLD_SECONDS
        if queue:
            queues = self._queues
            queues.pop(key, None)
            while len(queues) >= self.MAX_WORKERS:
                del queues[next(iter(queues))]
            queues[key] = queue  # a node's queue is fixed by its version
        self.noted += 1

    def seen(self, worker_id: str, session: str) -> None:
        """A poll of ``worker_id`` stamped ``session``: if the id's last poll had another stamp,
        another process polls under that id now, and the holds of the one before end."""
        if not session:
            return
        sessions = self._sessions
        last = sessions.get(worker_id)
        if last == session:
            return
        if last is None:
            while len(sessions) >= self.MAX_WORKERS:
                sessions.popitem(last=False)
        else:
            sessions.move_to_end(worker_id)
            self._by_worker.pop(worker_id, None)
        sessions[worker_id] = session

    def skip_for(self, worker_id: str) -> Skip:
        """The nodes ``worker_id``'s claims pass over now (most often none: one dict lookup)."""
        if not self._by_worker:
            return NOTHING_SKIPPED
        nodes = self._by_worker.get(worker_id)
        if not nodes:
            return NOTHING_SKIPPED
        now = self.clock()
        for key in [key for key, until in nodes.items() if until <= now]:
            del nodes[key]
        if not nodes:
            del self._by_worker[worker_id]
            return NOTHING_SKIPPED
        return frozenset(nodes)

    def held(self) -> int:
        """The holds in force now, over every worker (the metrics' gauge; ended ones dropped)."""
        return sum(len(self.skip_for(worker_id)) for worker_id in list(self._by_worker))

    def holds(self, worker_id: str, queue: str | None = None) -> list[tuple[str, str, str, float]]:
        """What ``worker_id``'s claims pass over now, each with the seconds its hold has left:
        (workflow, version, node, seconds), in that order (the dashboard's Queues page). With
        ``queue``, only the nodes on it (one whose queue was not noted is on every queue): a
        worker polling several queues was shown every hold under each of them."""
        skip = self.skip_for(worker_id)  # drops the holds that have ended
        if not skip:
            return []
        nodes = self._by_worker[worker_id]
        queues = self._queues
        now = self.clock()
        return [
            (*key, nodes[key] - now)
            for key in sorted(skip)
            if queue is None or queues.get(key, queue) == queue
        ]
