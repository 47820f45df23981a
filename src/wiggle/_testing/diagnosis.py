"""Why an instance is still running when a test's wait gives up: the words of the TimeoutError.

A wait of the environment (environment.py: ``wait``, ``wait_for``, ``sleep``) that ends
unfinished says where each token of its instance is, then why nothing moved: a user task that
waits on a person (skipping.py, ``Waiting.reasons``), a queue no worker serves, a step running on
a worker (which the clock does not jump over), time skipping being off. The environment decides
when to give up; this module reads its store, clock and workers to say why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from .._clock import VirtualClock
from .._engine.state import Instance, Token, TokenStatus
from .._model import Node
from .._server.instances import Instances
from .._server.pollers import Pollers
from .._storage.base import InstanceView
from ..client import InstanceInfo
from ..worker import Worker
from .skipping import TimeSkipper

__all__ = ["Diagnosis", "UNSERVED_SECONDS", "UNSERVED_CHECK_SECONDS"]

#: A wait gives up this soon (real seconds), instead of at its timeout, when a step of its
#: instance stays READY on a queue no worker of the environment serves (nor any worker polling
#: its server from outside): nothing can run it. How often a wait looks is the second figure.
UNSERVED_SECONDS = 2.0
UNSERVED_CHECK_SECONDS = 0.1
#: A TimeoutError names at most this many running steps.
SHOWN_STEPS = 3


def _where(info: InstanceInfo) -> str:
    """Each token of ``info`` with its status (and last error), for a wait that timed out."""
    return (
        ", ".join(
            f"{t.node_id} {t.status}" + (f" (last error: {t.last_error})" if t.last_error else "")
            for t in info.tokens
        )
        or "no tokens"
    )


def _running_hint(token: Token, node: Node | None, owner: str, now: int, whose: str) -> str:
    """Why a step running on a live worker holds a wait up, and how a test gets past it.

    The clock does not jump while a step runs on a worker of the environment (skipping.py,
    ``_token_due``): its own time limit (``timeout=``, the token's ``deadline_at``) and its
    heartbeat timeout (its lease, renewed by each heartbeat) count on the virtual clock, which
    only ``advance`` moves then. A hung handler is given up once the clock is moved past the
    earlier of the two (docs/semantics.md#step-time-limits; docs/testing.md#a-step-that-hangs).
    """
    said = (
        f"step {token.node_id!r}{whose} is RUNNING on worker {owner} (attempt {token.attempt}), and the "
        "clock does not jump while a step runs on a worker"
    )
    limits: list[tuple[int, str]] = []
    if token.deadline_at:
        millis = (
            node.timeout_millis
            if node is not None and node.timeout_millis
            else token.deadline_at - token.started_at
        )
        limits.append((token.deadline_at, f"time limit (timeout={millis / 1000:g} s)"))
    if node is not None and node.heartbeat_timeout_millis and token.lease_expires_at:
        limit = f"heartbeat timeout (heartbeat_timeout={node.heartbeat_timeout_millis / 1000:g} s)"
        limits.append((token.lease_expires_at, limit))
    if not limits:
        return said + "; it has no time limit: the wait lasts as long as its handler runs"
    ends_at, limit = min(limits)
    seconds = max(1, math.ceil((ends_at - now) / 1000))
    return (
        f"{said}; its {limit} runs out in {seconds} s of virtual time: "
        f"env.advance(timedelta(seconds={seconds})) moves the clock there"
    )


def _waits_on_time(tokens: Iterable[Token], now: int) -> bool:
    """True if none of ``tokens`` runs or is due and one waits for a moment of the clock (a
    sleep's end, a backoff, a user task's deadline): only time moves such an instance on."""
    waiting = False
    for token in tokens:
        if token.status == TokenStatus.RUNNING:
            return False
        if token.status == TokenStatus.READY and token.available_at <= now:
            return False
        if token.status in (TokenStatus.READY, TokenStatus.WAITING, TokenStatus.AWAITING):
            waiting = waiting or token.available_at > now
    return waiting


class Diagnosis:
    """Says why the instances of one environment have not moved on.

    It reads what the environment has: the server's ``instances`` (its store) and ``pollers``
    (the workers polling it from outside), the virtual ``clock``, the time ``skipper``, the
    environment's in-process ``workers`` (its own list, which grows and shrinks as workers start
    and stop) and ``live_worker`` (whether a worker id is one of them, running).
    """

    def __init__(
        self,
        instances: Instances,
        pollers: Pollers,
        clock: VirtualClock,
        skipper: TimeSkipper,
        workers: Sequence[Worker],
        live_worker: Callable[[str], bool],
    ) -> None:
        self.instances = instances
        self.pollers = pollers
        self.clock = clock
        self.skipper = skipper
        self.workers = workers
        self.live_worker = live_worker

    def served(self) -> set[str]:
        """The queues a worker of this environment serves or a worker of its server has polled
        (one outside the environment, pointed at its target)."""
        served = {q for worker in self.workers for q in worker.queues}
        served.update(q for poller in self.pollers.snapshot() for q in poller.queues)
        return served

    def unserved(self, info: InstanceInfo) -> list[str]:
        """The queues of ``info``'s READY steps that nothing serves (``served``)."""
        served = self.served()
        return sorted({t.queue for t in info.tokens if t.status == "READY" and t.queue not in served})

    async def _holders(self, views: Sequence[InstanceView], iid: str) -> list[tuple[str, Token]]:
        """The due READY steps of instances other than ``iid`` that no limit holds back, with
        their instances' ids: each keeps the clock still (skipping.py, ``_token_due``)."""
        now = self.clock.now()
        limits = await self.skipper.limits(list(views))
        found: list[tuple[str, Token]] = []
        for view in views:
            if view.instance.id == iid:
                continue  # its own READY steps: ``unserved`` and where its tokens are say them
            for token in view.tokens:
                if token.status == TokenStatus.READY and token.available_at <= now:
                    if not limits.holds_back(token, now)[0]:
                        found.append((view.instance.id, token))
        return found

    async def held_for_good(self, view: InstanceView) -> bool:
        """Whether ``view``'s instance waits only on time (a sleep, a retry's backoff, a deadline:
        nothing of it runs or is due) while a due step of another instance holds the clock on a
        queue nothing serves: nothing will run that step, so time stays still for every instance
        until the test cancels it or serves its queue. A wait that finds this for
        UNSERVED_SECONDS gives up then, as for its own instance's unserved step, rather than at
        its timeout (30 s by default)."""
        now = self.clock.now()
        if not _waits_on_time(view.tokens, now):
            return False
        served = self.served()
        holders = await self._holders(await self.skipper.live(), view.instance.id)
        return any(token.queue not in served for _, token in holders)

    async def holding(self, views: Sequence[InstanceView], iid: str = "") -> list[str]:
        """The due READY steps of instances other than ``iid`` that keep the clock still, in words.

        A due READY step counts as busy (skipping.py, ``_token_due``: a worker is about to claim
        it), for every instance: one on a queue nothing serves, left by an earlier test on a
        shared environment (``wiggle_module_env``), held the clock for good, and another test's
        30-day sleep timed out saying only where its own token was (an outside trial). Steps a
        limit holds back wait on time, not here."""
        served = self.served()
        found = await self._holders(views, iid)
        said = []
        for other, token in found[:SHOWN_STEPS]:
            why = (
                "which no worker of this environment serves"
                if token.queue not in served
                else "due" + (f" (last error: {token.last_error})" if token.last_error else "")
            )
            said.append(
                f"the clock is held by instance {other}: its step {token.node_id!r} is READY on queue "
                f"{token.queue!r}, {why}, and time does not jump for any instance while a step is due; "
                f"cancel it (env.cancel({other!r})) or serve its queue (start_worker([...]))"
            )
        if len(found) > SHOWN_STEPS:
            said.append(f"and {len(found) - SHOWN_STEPS} more steps holding the clock")
        return said

    async def still_running(
        self, info: InstanceInfo, status: str, waited: float, skipping: bool, gave_up: bool
    ) -> TimeoutError:
        """The TimeoutError of a wait that ends unfinished: where each token of ``info`` (the
        instance as it is now) is and why it waits."""
        when = (
            f"after {waited:.1f} s (real): a step waited {UNSERVED_SECONDS:g} s on a queue nothing serves"
            if gave_up
            else f"after {waited:.1f} s (real)"
        )
        return TimeoutError(
            f"instance {info.instance_id} is still {status} {when} at {_where(info)}"
            + await self.why(info, skipping)
        )

    async def not_reached(
        self, info: InstanceInfo, node: str, timeout: float, skipping: bool
    ) -> TimeoutError:
        """The TimeoutError of a ``wait_for`` that ends before a token of ``info`` is at ``node``."""
        return TimeoutError(
            f"instance {info.instance_id} did not reach {node!r} within {timeout} s; it is at {_where(info)}"
            + await self.why(info, skipping)
        )

    async def why(self, info: InstanceInfo, skipping: bool) -> str:
        """Why the instance of ``info`` has not moved on, for a TimeoutError ("" if nothing is known):
        a user task that waits on a person, a queue nobody serves, a step running on a worker
        (which the clock does not jump over), time skipping being off."""
        views = await self.skipper.live()
        hints = self.skipper.waiting(views).reasons
        hints += [
            f"no worker of this environment serves queue {q!r} (is its workflow in "
            "workflows=[...] or start_worker([...])?)"
            for q in self.unserved(info)
        ]
        hints += await self.running(views, info.instance_id)
        hints += await self.holding(views, info.instance_id)
        if not skipping:
            hints.append("time skipping is off: move the clock with advance()")
        return "".join(f"; {hint}" for hint in hints)

    async def running(self, views: Iterable[InstanceView], iid: str = "") -> list[str]:
        """The steps of ``views`` running on a live worker of the environment, in words (those of
        instance ``iid`` first, at most SHOWN_STEPS): while one runs the clock does not jump, for
        any instance (skipping.py), so a wait on a hung handler lasts until its real timeout unless
        the test moves the clock past the step's own time limit (``_running_hint``)."""
        now = self.clock.now()
        found: list[tuple[bool, Instance, Token, str]] = []
        for view in views:
            for token in view.tokens:
                owner = token.local_run_owner or token.lease_owner
                if token.status == TokenStatus.RUNNING and (
                    self.live_worker(owner) or self.live_worker(token.lease_owner)
                ):
                    found.append((view.instance.id != iid, view.instance, token, owner))
        found.sort(key=lambda item: item[0])  # the waited instance's own steps first
        said: list[str] = []
        for other, instance, token, owner in found[:SHOWN_STEPS]:
            # The definition the instance runs: its workflow's version.
            loaded = (await self.instances.get_workflow(instance.workflow, instance.version)).loaded
            node = loaded.nodes.get(token.node_id)
            said.append(
                _running_hint(token, node, owner, now, f" of instance {instance.id}" if other else "")
            )
        if len(found) > SHOWN_STEPS:
            said.append(f"and {len(found) - SHOWN_STEPS} more steps running")
        return said
