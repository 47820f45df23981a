"""Starting the benchmark's instances the way a user does: client threads calling ``Client.start``.

``--submit during`` runs a ``ThreadSubmitter`` inside the timed window, concurrently with the
workers (issue #16: a user's view of throughput includes starting the instances). By default the
threads share one blocking ``wiggle.Client`` (one channel), as the threads of one application
would (issue #28), so their concurrent starts batch themselves (wiggle/_client/batching.py);
``--submit-client per-thread`` gives each thread its own client (its own channel), as independent
processes would. The threads share one counter, so instance ``n`` is started exactly once, by
whichever thread takes it.

``--submit-rate R`` paces them as an open loop: instance ``n`` is due ``n / R`` seconds after the
submission began, whatever the earlier starts took, so a slow start delays no later due time
(the starts a closed loop of threads would leave out while it waits are made all the same); the
log keeps how far behind its due time each start was issued.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence

from wiggle import Client

__all__ = ["StartLog", "ThreadSubmitter"]


class StartLog:
    """What a submission did: the instances it started (id -> n), each call's duration, its span.

    Shared by the threads of a ``ThreadSubmitter`` (appends and dict stores are atomic under the
    GIL) and used alone by the asynchronous pre-submission.
    """

    def __init__(self) -> None:
        self.instance_ids: dict[str, int] = {}
        self.latencies: list[float] = []  # seconds per successful start, in completion order
        self.first: float | None = None  # time.monotonic() when the first start was issued
        self.last: float | None = None  # time.monotonic() when the last start returned
        self.behind: list[float] = []  # paced: seconds each start was issued after its due time

    def began(self) -> float:
        """Note a start being issued; returns its perf_counter() origin."""
        if self.first is None:
            self.first = time.monotonic()
        return time.perf_counter()

    def ended(self, instance_id: str, n: int, origin: float) -> None:
        """Note a start that returned ``instance_id`` for instance ``n`` (issued at ``origin``)."""
        self.latencies.append(time.perf_counter() - origin)
        self.instance_ids[instance_id] = n
        self.last = time.monotonic()

    @property
    def span(self) -> float:
        """Seconds from the first start issued to the last one returned (0 before both)."""
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first


class ThreadSubmitter:
    """``threads`` OS threads starting ``total`` instances of ``workflow`` on ``target``: one
    server's address, or several (instance ``n`` started on the ``n mod len``-th, as a load balancer
    in front of several servers would spread them).

    ``context(n)`` is instance ``n``'s initial context; ``rate`` (a second, in all; 0: unpaced) makes
    instance ``n`` due ``n / rate`` seconds after ``start()``. ``start()`` opens the shared client (unless
    ``shared`` is False) and returns at once; ``done``, ``error`` and ``log`` say how far it got; ``stop()`` makes the
    threads quit after their current call (on a failure elsewhere); ``join()`` waits for them and
    closes the client once they are all done.
    """

    def __init__(
        self,
        target: str | Sequence[str],
        workflow: str,
        total: int,
        threads: int,
        context: Callable[[int], dict[str, object]],
        shared: bool = True,
        rate: float = 0.0,
    ) -> None:
        self.targets = [target] if isinstance(target, str) else list(target)
        self.rate = rate
        self._origin = 0.0  # time.monotonic() at start(): instance n is due at _origin + n / rate
        self.workflow = workflow
        self.total = total
        self.context = context
        self.log = StartLog()
        self.error: BaseException | None = None
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.shared = shared  # one client for every thread (else each thread opens its own)
        self._clients: list[Client] = []  # shared: one per target, for every thread
        self._threads = [
            threading.Thread(target=self._run, name=f"bench-submit-{i}", daemon=True)
            for i in range(min(threads, total))
        ]

    def start(self) -> None:
        """Open the client the threads share (if shared) and start every thread."""
        if self.shared:
            self._clients = [Client(t) for t in self.targets]
        self._origin = time.monotonic()
        for thread in self._threads:
            thread.start()

    def _take(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or self._next >= self.total:
                return None
            n = self._next
            self._next += 1
            return n

    def _run(self) -> None:
        try:
            if self._clients:
                self._starts(self._clients)
            else:
                with contextlib.ExitStack() as stack:
                    self._starts([stack.enter_context(Client(t)) for t in self.targets])
        except BaseException as exc:  # reported by the driver; the other threads stop too
            self.error = self.error or exc
            self._stop.set()

    def _starts(self, clients: list[Client]) -> None:
        while (n := self._take()) is not None:
            if self.rate and not self._wait_due(n):
                return
            origin = self.log.began()
            info = clients[n % len(clients)].start(self.workflow, self.context(n))
            self.log.ended(info.instance_id, n, origin)

    def _wait_due(self, n: int) -> bool:
        """Wait until instance ``n`` is due (paced) and note how late it is issued; False if
        stopped meanwhile."""
        due = self._origin + n / self.rate
        wait = due - time.monotonic()
        if wait > 0 and self._stop.wait(wait):
            return False
        self.log.behind.append(max(time.monotonic() - due, 0.0))
        return True

    @property
    def done(self) -> bool:
        """True once every thread has finished (all started, or stopped by an error)."""
        return not any(t.is_alive() for t in self._threads)

    @property
    def started(self) -> int:
        """How many starts have returned so far."""
        return len(self.log.latencies)

    def stop(self) -> None:
        """Ask the threads to stop after their current call."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds in all for the threads to finish."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        if self._clients and self.done:
            for client in self._clients:
                client.close()
            self._clients = []
