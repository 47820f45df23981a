"""Direct hand-off: a step that a commit makes READY goes to a poller already waiting for it.

Without it a step costs two transactions between workers: the commit that makes it READY (a
report, a start) and then the claim of the poller that commit's announcement wakes. With it, the
transition that makes the step READY leases it, in the same transaction, to a poller of this node
waiting on its queue (the reporting worker's if one waits, else the newest:
``Notifier.take_armed``, wiggle/_storage/notifier.py; ``Delivery.hand_off``,
wiggle/_server/delivery.py): the step is stored RUNNING under that worker's lease and the poller
gets it once the commit is acknowledged. A step nobody is waiting for stays READY and is claimed
as before.

The poller is taken out of the waiting lists when the first step is reserved for it, so no
other announcement can take it. Until that reservation settles, further transitions (the other
starts of a start group, other reports) may reserve more steps for the same poller, up to the
number it asked for: each transition reserves a ``Share``, the steps of its own transaction. A
share settles one of three ways:

- its commit is acknowledged: the store delivers it (``Share.deliver``, from its announcement
  path) and its steps join what the poll returns;
- its transition is not committed (an error, the store running the transition again):
  ``Share.release`` drops its steps, they were never stored as leased;
- the poller is gone when the commit is delivered (its call was cancelled): the steps are leased
  to a worker that does not know of them, so they are given back (``on_orphan``: a release, as a
  worker's would be, docs/semantics.md#mixed-fleets).

The poll returns when every share reserved for it has settled (no share is added once one has
settled), with the delivered steps; with none, it looks for work again with a claim. Shares of
one commit group settle together, and those of different groups a commit apart; a share whose
transaction is slower than that (waiting for a row lock, say) is not waited for:
``PARTIAL_SECONDS`` after the first share settled the poll returns what was delivered, and a
share committed later is given back. A reservation none of whose shares settles within
``SETTLE_SECONDS`` (a caller cancelled while its transaction failed) ends the same way, so a
poller never waits on it for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._engine.engine import Claimed

__all__ = ["Handoff", "Share", "settle"]

#: The longest a reserved poller waits for its commits before looking for work again.
SETTLE_SECONDS = 10.0
#: Once one share has settled, how long the poller waits for the others before it returns.
PARTIAL_SECONDS = 0.5


class Handoff:
    """The steps reserved for one waiting poller, by one or more transitions (``Share``)."""

    __slots__ = (
        "claims",
        "future",
        "finished",
        "timer",
        "on_orphan",
        "worker_id",
        "capacity",
        "lease_millis",
        "reserved",
        "pending",
        "open",
    )

    def __init__(
        self,
        future: asyncio.Future[list[Claimed]],
        on_orphan: Callable[[list[Claimed]], None],
        worker_id: str,
        capacity: int,
        lease_millis: int | None,
    ) -> None:
        self.claims: list[Claimed] = []  # delivered: committed as leased to the poller
        # the poller's: whose lease, how many steps at most, the lease length it asked for
        self.worker_id = worker_id
        self.capacity = capacity
        self.lease_millis = lease_millis
        self.future = future  # the poller awaits it: the steps, or [] to look for work again
        self.finished = False
        self.reserved = 0  # steps reserved by every share so far
        self.pending = 0  # shares not yet settled
        self.open = True  # takes new shares: until one settles, or it is full
        self.on_orphan = on_orphan
        self.timer = asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._finish)

    def accepting(self) -> bool:
        """A transition may still reserve steps here."""
        return self.open and self.reserved < self.capacity and not self.future.done()

    def share(self) -> Share:
        """A new transition's share of this reservation (settled by the store, or released)."""
        self.pending += 1
        return Share(self)

    def _settled(self, claims: list[Claimed] | None) -> None:
        """One share settled: ``claims`` committed (None: not committed)."""
        if self.finished:
            if claims:
                self.on_orphan(claims)  # committed as leased to a poller no longer waiting for it
            return
        if claims:
            self.claims.extend(claims)
        self.pending -= 1
        if self.pending <= 0:
            self._finish()
        elif self.open:  # the first to settle: the others get PARTIAL_SECONDS
            self.timer.cancel()
            self.timer = asyncio.get_running_loop().call_later(PARTIAL_SECONDS, self._finish)
        self.open = False

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.open = False
        self.timer.cancel()
        if not self.future.done():
            self.future.set_result(self.claims)
        elif self.claims:
            self.on_orphan(self.claims)  # the poller left (its call was cancelled) meanwhile
        self.claims = []


class Share:
    """The steps one transition reserved for a ``Handoff``'s poller; settled once."""

    __slots__ = ("handoff", "claims", "settled")

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff
        self.claims: list[Claimed] = []
        self.settled = False

    def add(self, claimed: Claimed) -> None:
        self.claims.append(claimed)
        self.handoff.reserved += 1

    def deliver(self) -> None:
        """The transition committed: its steps go to the poller (or back, if it is gone)."""
        if not self.settled:
            self.settled = True
            self.handoff._settled(self.claims)

    def release(self) -> None:
        """The transition will not commit (as far as the caller knows): its steps are void."""
        if not self.settled:
            self.settled = True
            self.handoff._settled(None)


def settle(shares: list[Share] | None) -> None:
    """Deliver the shares of committed changes (the stores call this after the commit)."""
    if shares:
        for share in shares:
            share.deliver()
