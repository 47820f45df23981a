"""Direct hand-off: a step that a commit makes READY goes to a poller already waiting for it.

Without it a step costs two transactions between workers: the commit that makes it READY (a
report, a start) and then the claim of the poller that commit's announcement wakes. With it, the
transition that makes the step READY leases it, in the same transaction, to the oldest poller of
this node waiting on its queue (``Delivery.hand_off``, wiggle/_server/delivery.py): the step is stored RUNNING under that
worker's lease and the poller gets it once the commit is acknowledged. A step nobody is waiting
for stays READY and is claimed as before.

The poller is taken out of the waiting lists when the step is reserved for it, so no other
transition or announcement can take it. The reservation ends one of three ways:

- the commit is acknowledged: the store delivers (``deliver``, from its announcement path) and the
  poll returns the steps;
- the transition is not committed (an error, the store running the transition again): ``release``
  hands the poller nothing and it looks for work again with a claim;
- the poller is gone when the commit is delivered (its call was cancelled, or ``release`` came
  first): the steps are leased to a worker that does not know of them, so they are given back
  (``on_orphan``: a release, as a worker's would be, docs/semantics.md#mixed-fleets).

A reservation neither delivered nor released within ``SETTLE_SECONDS`` (a caller cancelled while
its transaction failed) is released by a timer, so a poller never waits on it for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._engine.engine import Claimed

__all__ = ["Handoff", "settle"]

#: The longest a reserved poller waits for its commit before looking for work again.
SETTLE_SECONDS = 10.0


class Handoff:
    """Steps reserved for one waiting poller by one transition; settled once."""

    __slots__ = ("claims", "future", "settled", "timer", "on_orphan", "worker_id", "capacity", "lease_millis")

    def __init__(
        self, future: asyncio.Future[list[Claimed]], on_orphan: Callable[[list[Claimed]], None]
    ) -> None:
        self.claims: list[Claimed] = []
        # the poller's: whose lease, how many steps at most, the lease length it asked for
        self.worker_id = ""
        self.capacity = 0
        self.lease_millis: int | None = None
        self.future = future  # the poller awaits it: the steps, or [] to look for work again
        self.settled = False
        self.on_orphan = on_orphan
        self.timer = asyncio.get_running_loop().call_later(SETTLE_SECONDS, self.release)

    def deliver(self) -> None:
        """The transition committed: the steps go to the poller (or back, if it is gone)."""
        if self.settled or self.future.done():
            self.timer.cancel()
            self.settled = True
            if self.claims:
                self.on_orphan(self.claims)  # committed as leased to a poller that is not waiting
            return
        self.settled = True
        self.timer.cancel()
        self.future.set_result(self.claims)

    def release(self) -> None:
        """The transition will not commit (as far as the caller knows): the poller looks again."""
        if self.settled:
            return
        self.settled = True
        self.timer.cancel()
        if not self.future.done():
            self.future.set_result([])


def settle(handoffs: list[Handoff] | None) -> None:
    """Deliver the hand-offs of committed changes (the stores call this after the commit)."""
    if handoffs:
        for handoff in handoffs:
            handoff.deliver()
