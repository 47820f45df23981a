"""Failed authentications, counted per address: past a few in a minute, that address waits.

Every credential a caller presents and the server does not know counts, whichever way it came:
a bearer token on the gRPC port (unary calls and streams alike), an ``Authorization`` header on
the HTTP port (the JSON API, /metrics), a token at the dashboard's ``POST /signin``, a client
certificate that is not in the identity file. An address that presented ``MAX_FAILURES``
different unknown credentials within ``WINDOW_SECONDS`` is refused on every port, whatever it
presents (a right token included: else a guess that hits would still get in), until the oldest
of them is that old; other addresses are not touched. The refusal says so: 429 on HTTP,
UNAUTHENTICATED on gRPC (which workers and clients treat as a refusal to report, not an outage
to retry at once).

*Different* credentials: a worker whose token was revoked sends the same token again and again
(every few seconds); it guesses nothing, and must not lock out the other workers of its host.
Only a hash prefix of each refused credential is kept, for that comparison, never the
credential.

The log: a WARNING at an address's first failure, then at most one line per address per
``LOG_INTERVAL_SECONDS`` saying how many were left out meanwhile, and one when it starts to
wait; at most ``MAX_LINES_PER_INTERVAL`` such lines per interval in all (a flood from many
addresses), the next one then saying how many were left out. Tokens made by ``wiggle token``
carry 256 bits, out of guessing's reach; a short hand-written token is not, and a log of one line
per guess fills a disk (docs/security.md#secrets-stay-secret).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import Unauthenticated
from .caller_text import loggable

__all__ = [
    "AuthFailures",
    "Throttled",
    "MAX_FAILURES",
    "WINDOW_SECONDS",
    "LOG_INTERVAL_SECONDS",
    "MAX_LINES_PER_INTERVAL",
    "peer_address",
]

log = logging.getLogger("wiggle.server")

MAX_FAILURES = 10
WINDOW_SECONDS = 60.0
LOG_INTERVAL_SECONDS = 60.0
MAX_LINES_PER_INTERVAL = 100
MAX_ADDRESSES = 10_000  # addresses remembered at most (the one refused longest ago goes first)


class Throttled(Unauthenticated):
    """An address waiting after too many unknown credentials (``AuthFailures.refusal``): the
    gRPC port answers UNAUTHENTICATED with its message, the HTTP port 429."""


def peer_address(peer: str) -> str:
    """The address of a gRPC peer string (``ipv4:10.0.0.5:41234``, ``ipv6:[::1]:41234``, ``unix:...``),
    without its port: the failures of one host count together, whatever its connections."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return _unmapped(rest[1:].partition("]")[0])
    if kind in ("ipv4", "ipv6"):
        return rest.rpartition(":")[0] or rest
    return peer


def _unmapped(address: str) -> str:
    """An IPv4 address as itself, not as the IPv6 form a dual-stack socket reports it in
    (``::ffff:10.0.0.5``): one host, one count, whichever port it called."""
    if address.lower().startswith("::ffff:") and "." in address:
        return address[7:]
    return address


def _fingerprint(credential: str) -> str:
    # enough to tell two credentials apart, too little to be of use to anyone reading memory
    return hashlib.sha256(credential.encode("utf-8", "replace")).hexdigest()[:16]


@dataclass
class _Address:
    failures: deque[tuple[float, str]] = field(default_factory=deque)  # (when, fingerprint)
    next_line_at: float = 0.0  # the earliest time of this address's next log line
    unlogged: int = 0  # failed or refused attempts since its last line


class AuthFailures:
    """The failures of every address, for one server (its gRPC port and HTTP port share it).

    Thread-safe: the HTTP port without the dashboard serves /metrics in threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._addresses: OrderedDict[str, _Address] = OrderedDict()
        self._interval_ends = 0.0  # the end of the current interval of MAX_LINES_PER_INTERVAL
        self._lines = 0  # lines logged in the current interval
        self._hidden = 0  # lines left out in the current interval (too many addresses)

    @property
    def any(self) -> bool:
        """Whether any address has failures counted: when none has, no call needs its address
        looked at (the interceptor's fast path)."""
        return bool(self._addresses)

    def _recent(self, address: str, now: float) -> _Address | None:
        entry = self._addresses.get(address)
        if entry is None:
            return None
        failures = entry.failures
        while failures and now - failures[0][0] >= WINDOW_SECONDS:
            failures.popleft()
        if not failures and now >= entry.next_line_at and not entry.unlogged:
            del self._addresses[address]  # kept while its next line has a count to say
            return None
        return entry

    def _wait(self, entry: _Address, now: float) -> float:
        if len(entry.failures) < MAX_FAILURES:
            return 0.0
        return max(1.0, WINDOW_SECONDS - (now - entry.failures[0][0]))

    def refusal(self, address: str, where: str) -> str:
        """'' if ``address`` may try to authenticate; else why it may not (the message to answer
        with), counting the refused attempt for the log."""
        if not self._addresses:
            return ""
        address = _unmapped(address)
        with self._lock:
            now = self.clock()
            entry = self._recent(address, now)
            if entry is None:
                return ""
            wait = self._wait(entry, now)
            if not wait:
                return ""
            self._note(address, entry, now, f"refused ({where}): it is waiting after {MAX_FAILURES} failures")
        return (
            f"{MAX_FAILURES} unknown credentials from this address ({address}) in the last "
            f"{WINDOW_SECONDS:g} s: its calls and sign-ins are refused, whatever the credential, for "
            f"{int(wait + 0.999)} s more; check the token (WIGGLE_TOKEN_FILE) of the clients and "
            "workers on that host"
        )

    def failed(self, address: str, credential: str, why: str, where: str) -> None:
        """Count the unknown ``credential`` (a token, a header, a certificate's name) that
        ``address`` presented (``where``: gRPC, HTTP, the sign-in), and log it as the module says."""
        fingerprint = _fingerprint(credential)
        address = _unmapped(address)
        with self._lock:
            now = self.clock()
            entry = self._recent(address, now)
            if entry is None:
                if len(self._addresses) >= MAX_ADDRESSES:
                    self._addresses.popitem(last=False)
                entry = self._addresses[address] = _Address()
            else:
                self._addresses.move_to_end(address)
            failures = entry.failures
            if all(f != fingerprint for _, f in failures):  # the same one again guesses nothing
                failures.append((now, fingerprint))
                if len(failures) == MAX_FAILURES:  # it starts to wait: said whenever its last line was
                    self._line(
                        address,
                        entry,
                        now,
                        f"{MAX_FAILURES} unknown credentials in {WINDOW_SECONDS:g} s (the last: {why}); "
                        f"its calls and sign-ins wait until the oldest is {WINDOW_SECONDS:g} s old",
                    )
                    return
            self._note(address, entry, now, f"{why} ({where})")

    def _note(self, address: str, entry: _Address, now: float, what: str) -> None:
        if now < entry.next_line_at:
            entry.unlogged += 1
            return
        self._line(address, entry, now, what)

    def _line(self, address: str, entry: _Address, now: float, what: str) -> None:
        if now >= self._interval_ends:
            hidden, self._hidden = self._hidden, 0
            self._interval_ends, self._lines = now + LOG_INTERVAL_SECONDS, 0
        else:
            hidden = 0
        if self._lines >= MAX_LINES_PER_INTERVAL:  # a flood from many addresses: counted only
            self._hidden += 1
            entry.unlogged += 1
            return
        self._lines += 1
        more = f"; {entry.unlogged} more from it since its last line" if entry.unlogged else ""
        others = f" ({hidden} lines of other addresses were left out: too many)" if hidden else ""
        entry.unlogged = 0
        entry.next_line_at = now + LOG_INTERVAL_SECONDS
        log.warning("authentication failed from %s: %s%s%s", address, loggable(what, 300), more, others)
