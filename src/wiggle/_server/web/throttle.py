"""Failed dashboard sign-ins, counted per address: past a few in a minute, that address waits.

A wrong token at ``POST /signin`` is refused 401 and logged; an address that has been refused
``MAX_FAILURES`` times in the last ``WINDOW_SECONDS`` is answered 429 for any sign-in (a right
token included) until its oldest counted failure is that old, and is logged once for it. Tokens
made by ``wiggle token`` are out of guessing's reach; a short hand-written one, or the log
filled with one line per guess, is not (docs/security.md#secrets-stay-secret).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from ...errors import ErrorCode
from .errors import HttpProblem

__all__ = ["SignInThrottle", "MAX_FAILURES", "WINDOW_SECONDS"]

MAX_FAILURES = 10
WINDOW_SECONDS = 60.0
MAX_ADDRESSES = 10_000  # addresses remembered at most (the one refused longest ago goes first)


class SignInThrottle:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str, now: float) -> deque[float] | None:
        failures = self._failures.get(address)
        if failures is None:
            return None
        while failures and now - failures[0] >= WINDOW_SECONDS:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return None
        return failures

    def check(self, address: str) -> None:
        """A 429 HttpProblem if ``address`` failed MAX_FAILURES times within the window."""
        now = self.clock()
        failures = self._recent(address, now)
        if failures is not None and len(failures) >= MAX_FAILURES:
            wait = max(1, int(WINDOW_SECONDS - (now - failures[0]) + 0.999))
            raise HttpProblem(
                429,
                ErrorCode.RESOURCE_EXHAUSTED,
                f"{MAX_FAILURES} failed sign-ins from this address in the last {WINDOW_SECONDS:g} s; "
                f"try again in {wait} s",
            )

    def failed(self, address: str) -> bool:
        """Count a failed sign-in of ``address``; True if it reaches the limit just now (log it)."""
        now = self.clock()
        failures = self._recent(address, now)
        if failures is None:
            if len(self._failures) >= MAX_ADDRESSES:
                self._failures.popitem(last=False)
            failures = self._failures[address] = deque()
        else:
            self._failures.move_to_end(address)
        failures.append(now)
        return len(failures) == MAX_FAILURES
