"""The dashboard's browser sessions: signed in once with a token or a client certificate, kept on
the server, named by an opaque random id in a cookie (docs/dashboard.md#signing-in).

A session holds what it was opened with (the token's SHA-256, or the certificate's common name),
the identity that credential had, and its anti-forgery token. It ends at sign-out, when unused for
``idle`` seconds, ``max_age`` seconds after sign-in whatever its use, and when a reload of the
identity file removes or changes its identity (``IdentityTable.on_reload`` calls ``revalidate``).
Sessions live in this server process's memory: a restart signs everyone out.

Why a session ended (idle, its maximum age, its identity removed or changed, a limit) is kept for
``ENDED_KEPT_SECONDS`` after, so that its cookie, which outlives the session's maximum age by as
much (signin.py), is answered with the reason, not "the session is unknown": the idle timeout said
why, the maximum age and a revocation did not (an outside trial).

At most ``MAX_SESSIONS_PER_IDENTITY`` per identity: a new sign-in past it ends that identity's
least recently used session, never another's, so signing in again and again with one credential
(a viewer's, say) cannot push anyone else out. At most ``MAX_SESSIONS`` in all: past it the least
recently used session of the identity holding the most ends.

"Used" means a person did something: a page's own background refresh (every 2 s, the header
``X-Wiggle-Refresh: 1`` that /static/dashboard.js sends: access.py ``REFRESH_HEADER``) reads with
the session but does not count as use, or a forgotten open tab would never reach ``idle``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..._security.tokens import Identity, IdentityTable

__all__ = [
    "Session",
    "Sessions",
    "TOKEN",
    "CERTIFICATE",
    "MAX_SESSIONS",
    "MAX_SESSIONS_PER_IDENTITY",
    "ENDED_KEPT_SECONDS",
    "UNKNOWN",
]

log = logging.getLogger("wiggle.http")

#: how a session was opened: ``key`` is then the token's SHA-256, or the certificate's common name
TOKEN, CERTIFICATE = "token", "certificate"
#: sessions held at once; past it the least recently used one of the identity with the most ends
MAX_SESSIONS = 10_000
#: sessions of one identity at once (browsers, devices, people sharing it); past it its own least
#: recently used one ends
MAX_SESSIONS_PER_IDENTITY = 20
#: how long why a session ended is kept (at most MAX_SESSIONS reasons), and how long its cookie
#: outlives its maximum age (signin.py): the cookie that comes back then is told why
ENDED_KEPT_SECONDS = 3600
UNKNOWN = "the session is unknown (signed out, expired, or the server restarted)"
REVOKED = "its identity was removed or changed (the identity file was reloaded)"


@dataclass
class Session:
    """One signed-in browser."""

    id: str
    identity: Identity
    kind: str  # TOKEN or CERTIFICATE
    key: str
    csrf: str  # the anti-forgery token its pages send back (X-Wiggle-CSRF)
    created: float  # the clock's seconds
    last_used: float
    expires_at_ms: int  # the latest end, by the server's clock: the sign-in's answer


class Sessions:
    """The sessions of one HTTP port. ``clock`` (seconds, monotonic) decides expiry; ``now_ms``
    (the server's Clock, ms since the epoch) only dates the end the sign-in answers with."""

    def __init__(
        self,
        table: IdentityTable | None,
        idle: float,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
        limit: int = MAX_SESSIONS,
        now_ms: Callable[[], int] | None = None,
        per_identity: int = MAX_SESSIONS_PER_IDENTITY,
    ) -> None:
        self.table = table
        self.idle = idle
        self.max_age = max_age
        self.clock = clock
        self.limit = limit
        self.per_identity = per_identity
        self.now_ms = now_ms or (lambda: int(self.clock() * 1000))  # the server's Clock, for the answer
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}
        self._why_ended: dict[str, tuple[float, str]] = {}  # id -> (when, why), oldest first
        self._secret = secrets.token_bytes(32)  # for the anti-forgery token of proxy-signed requests
        if table is not None:
            table.on_reload(self.revalidate)

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, identity: Identity, kind: str, key: str) -> Session:
        """A new session for ``identity``, signed in with the credential ``kind``/``key``."""
        now = self.clock()
        session = Session(
            id=secrets.token_urlsafe(32),
            identity=identity,
            kind=kind,
            key=key,
            csrf=secrets.token_urlsafe(32),
            created=now,
            last_used=now,
            expires_at_ms=self.now_ms() + int(self.max_age * 1000),
        )
        name = identity.name
        with self._lock:
            self._sweep(now)
            own = [s for s in self._by_id.values() if s.identity.name == name]
            while len(own) >= self.per_identity:
                oldest = min(own, key=lambda s: s.last_used)
                own.remove(oldest)
                self._end(oldest, f"{self.per_identity} sessions per identity is the limit", now)
                log.info(
                    "session of %s ended: %d sessions per identity is the limit", name, self.per_identity
                )
            while len(self._by_id) >= self.limit:
                oldest = self._most_held_oldest()
                self._end(oldest, f"{self.limit} sessions is the limit", now)
                log.info("session of %s ended: %d sessions is the limit", oldest.identity.name, self.limit)
            self._by_id[session.id] = session
        log.info("%s signed in to the dashboard with a %s", identity.name, kind)
        return session

    def get(self, session_id: str, touch: bool = True) -> tuple[Session | None, str]:
        """(the live session called ``session_id``, '') and, with ``touch``, marks it used; (None,
        why) otherwise. ``touch`` False: a background refresh, which must not keep it alive."""
        now = self.clock()
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                ended = self._why_ended.get(session_id)
                if ended is not None and now - ended[0] < ENDED_KEPT_SECONDS:
                    return None, f"the session ended: {ended[1]}"
                return None, UNKNOWN
            why = self._ended(session, now)
            if why:
                self._end(session, why, now)
                log.info("session of %s ended: %s", session.identity.name, why)
                return None, f"the session ended: {why}"
            if touch:
                session.last_used = now
            return session, ""

    def close(self, session_id: str) -> Session | None:
        """Sign out: end the session (None if there was none)."""
        with self._lock:
            session = self._by_id.pop(session_id, None)
        if session is not None:
            log.info("%s signed out of the dashboard", session.identity.name)
        return session

    def revalidate(self, revoked: frozenset[str] = frozenset()) -> None:
        """End every session whose identity the reload named in ``revoked``, or whose credential
        now means another identity (names, roles, queues) or none. The identity
        file's reload calls it (``IdentityTable.on_reload``)."""
        with self._lock:
            gone = [
                s for s in self._by_id.values() if s.identity.name in revoked or self.current(s) != s.identity
            ]
            now = self.clock()
            for session in gone:
                self._end(session, REVOKED, now)
        for session in gone:
            log.info("session of %s ended: %s", session.identity.name, REVOKED)

    def current(self, session: Session) -> Identity | None:
        """What the session's credential is worth now (None: nothing)."""
        if self.table is None:  # client certificates without an identity file: nothing to change
            return session.identity
        if session.kind == TOKEN:
            return self.table.by_token_hash(session.key)
        return self.table.by_certificate(session.key)

    def proxy_csrf(self, name: str) -> str:
        """The anti-forgery token of pages served to ``name`` signed in by the SSO proxy's header."""
        return hmac.new(self._secret, f"proxy:{name}".encode(), hashlib.sha256).hexdigest()

    def _ended(self, session: Session, now: float) -> str:
        if now - session.last_used >= self.idle:
            return f"unused for {self.idle:g} s (session_idle_seconds)"
        if now - session.created >= self.max_age:
            return f"signed in {self.max_age:g} s ago (session_max_seconds)"
        return ""

    def _most_held_oldest(self) -> Session:
        """The least recently used session of the identity holding the most (the lock held)."""
        held: dict[str, list[Session]] = {}
        for session in self._by_id.values():
            held.setdefault(session.identity.name, []).append(session)
        most = max(held.values(), key=len)
        return min(most, key=lambda s: s.last_used)

    def _end(self, session: Session, why: str, now: float) -> None:
        """End ``session`` and keep why for ENDED_KEPT_SECONDS (the lock held)."""
        self._by_id.pop(session.id, None)
        self._why_ended[session.id] = (now, why)
        while len(self._why_ended) > self.limit:
            del self._why_ended[next(iter(self._why_ended))]

    def _sweep(self, now: float) -> None:
        for session in list(self._by_id.values()):
            why = self._ended(session, now)
            if why:
                self._end(session, why, now)
        while self._why_ended:
            oldest = next(iter(self._why_ended))
            if now - self._why_ended[oldest][0] < ENDED_KEPT_SECONDS:
                break
            del self._why_ended[oldest]
