"""The identities a deployment knows: hashed bearer tokens and client-certificate names, each with
its roles and (for workers) its queues. Read from a JSON file, reloaded when the file changes.

The file (``--auth-file``)::

    {"identities": [
      {"name": "ops", "roles": ["admin"], "token_sha256": "<hex>"},
      {"name": "payments-worker", "roles": ["worker"], "queues": ["payments"],
       "token_sha256": "<hex>"},
      {"name": "billing-svc", "roles": ["client"], "cert_cn": "billing.internal"}
    ]}

Only the SHA-256 of a token is stored (``wiggle token`` makes a token and its entry); tokens are
long random strings, so a plain hash is enough and a stolen file reveals no usable token. Names,
token hashes and certificate names are each unique in a file: a file that repeats one is refused
(at start an error naming both entries; at a reload the identities in use are kept). After each
reload the callbacks registered with ``IdentityTable.on_reload`` learn which identities were
removed or changed, so that what they authenticated (open streams, dashboard sessions) can end
(docs/security.md). A file its group or others may write is loaded with a warning
(file_checks.py): whoever can write it can give themselves any role.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence

import msgspec

from .file_checks import warn_if_exposed

__all__ = [
    "Role",
    "Identity",
    "IdentityTable",
    "ReloadCallback",
    "hash_token",
    "new_token",
    "check_identity",
    "ALL_QUEUES",
]

log = logging.getLogger("wiggle.server")

ALL_QUEUES = "*"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-@]{0,99}")

#: ``on_reload`` callbacks: called with the names of the identities a reload removed or changed.
ReloadCallback = Callable[[frozenset[str]], None]


class Role(str, enum.Enum):
    """What a credential may do (the per-RPC table is wiggle/_security/roles.py)."""

    ADMIN = "admin"
    CLIENT = "client"
    WORKER = "worker"
    VIEWER = "viewer"


class Identity(msgspec.Struct, frozen=True):
    """Who is calling: a name, its roles, and the queues a worker credential may serve."""

    name: str
    roles: frozenset[Role]
    queues: frozenset[str] = frozenset()

    def may_serve(self, queue: str) -> bool:
        """Whether this credential may poll ``queue``."""
        return ALL_QUEUES in self.queues or queue in self.queues


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the identity file stores it."""
    return hashlib.sha256(token.strip().encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return "wgl_" + secrets.token_urlsafe(32)


def _identity(entry: object, index: int, proxied: bool = False) -> tuple[Identity, str, str]:
    """One entry, checked; ``proxied``: an SSO proxy may sign people in by name (a trusted header is
    set), so an entry with neither a token hash nor a certificate name is a person it signs in."""
    where = f"identity #{index + 1}"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be an object with name, roles and token_sha256 or cert_cn")
    unknown = set(entry) - {"name", "roles", "queues", "token_sha256", "cert_cn"}
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: name {name!r} must be 1-100 of [A-Za-z0-9_.-@]")
    where = f"identity {name!r}"
    raw_roles = entry.get("roles")
    if not isinstance(raw_roles, Sequence) or isinstance(raw_roles, str) or not raw_roles:
        raise ValueError(f"{where}: roles must be a non-empty list of admin, client, worker, viewer")
    try:
        roles = frozenset(Role(r) for r in raw_roles)
    except ValueError:
        raise ValueError(
            f"{where}: roles {list(raw_roles)} must be among admin, client, worker, viewer"
        ) from None
    queues = entry.get("queues", [])
    if (
        not isinstance(queues, Sequence)
        or isinstance(queues, str)
        or not all(isinstance(q, str) for q in queues)
    ):
        raise ValueError(f'{where}: queues must be a list of queue names (or ["*"] for every queue)')
    if Role.WORKER in roles and not queues:
        raise ValueError(
            f'{where}: a worker identity lists the queues it may serve ("queues": ["*"] for all)'
        )
    digest = entry.get("token_sha256", "")
    cert_cn = entry.get("cert_cn", "")
    if not isinstance(digest, str) or (digest and not _HEX64.fullmatch(digest)):
        raise ValueError(f"{where}: token_sha256 must be 64 lowercase hex digits (wiggle token makes one)")
    if not isinstance(cert_cn, str):
        raise ValueError(f"{where}: cert_cn must be a certificate's common name (a string)")
    if not (digest or cert_cn or proxied):
        raise ValueError(
            f"{where}: give token_sha256, cert_cn, or both (an entry with neither is a person an SSO "
            "proxy signs in, taken only with --http-trusted-header)"
        )
    return Identity(name, roles, frozenset(queues)), digest, cert_cn


def check_identity(entry: Mapping[str, object]) -> None:
    """Raise ValueError, as a server loading its --auth-file would, unless ``entry`` is a valid
    identity entry (``wiggle token`` checks the entry it prints: wiggle/_cli/admin.py)."""
    _identity(entry, 0)


def _unique(entries: list[tuple[Identity, str, str]], path: str) -> None:
    """Refuse a file where two entries share a name, a token hash or a certificate name, naming both
    (a repeated hash would let the later entry silently win: a viewer's token turned admin)."""
    seen: dict[tuple[str, str], int] = {}
    for i, (identity, digest, cn) in enumerate(entries):
        for what, key in (("name", identity.name), ("token_sha256", digest), ("cert_cn", cn)):
            if not key:
                continue
            first = seen.setdefault((what, key), i)
            if first == i:
                continue
            other = entries[first][0].name
            if what == "name":
                raise ValueError(
                    f"identity file {path!r} names {key!r} twice (identities #{first + 1} and #{i + 1}); "
                    "names must be unique"
                )
            shown = f" {key!r}" if what == "cert_cn" else ""  # a hash is never echoed
            raise ValueError(
                f"identity file {path!r}: identities {other!r} (#{first + 1}) and {identity.name!r} "
                f"(#{i + 1}) have the same {what}{shown}; each credential must belong to one identity"
            )


class IdentityTable:
    """The identities of one file, looked up by token or certificate name; thread-safe reloads."""

    def __init__(self, path: str, proxied: bool = False) -> None:
        """``proxied``: an SSO proxy signs people in by name (``http_trusted_header``), so entries
        with neither ``token_sha256`` nor ``cert_cn`` are taken (they can sign in only through it)."""
        self.path = path
        self.proxied = proxied
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] = (0, 0)
        self._by_digest: dict[str, Identity] = {}
        self._by_cn: dict[str, Identity] = {}
        self._entries: dict[str, tuple[Identity, str, str]] = {}  # name -> (identity, hash, cert name)
        self._callbacks: list[ReloadCallback] = []
        self.reload_if_changed(force=True, strict=True)

    def __len__(self) -> int:
        return len(self._by_digest) + len(self._by_cn)

    def __repr__(self) -> str:
        return f"IdentityTable({self.path!r}, {len(self._entries)} identities)"

    def on_reload(self, callback: ReloadCallback) -> Callable[[], None]:
        """Call ``callback(revoked)`` after every reload that loaded a new file: ``revoked`` holds
        the names of the identities it removed or changed (roles, queues, token hash or
        certificate name), possibly none. Runs in the thread that reloaded (the server's event
        loop: SIGHUP and the reload timer), after the new identities are in force; keep it short
        and non-blocking. An exception is logged and the other callbacks still run. Returns a
        function that unregisters ``callback``."""
        with self._lock:
            self._callbacks.append(callback)

        def cancel() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return cancel

    def _parse(self) -> dict[str, tuple[Identity, str, str]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as exc:
            raise ValueError(f"cannot read the identity file {self.path!r}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"identity file {self.path!r} is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"identity file {self.path!r} is not UTF-8 text (byte {exc.start}): it must be a JSON document"
            ) from None
        entries = doc.get("identities") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f'identity file {self.path!r} must be {{"identities": [...]}}')
        try:
            parsed = [_identity(entry, i, self.proxied) for i, entry in enumerate(entries)]
        except ValueError as exc:  # the entry's own words, under the file's name (as _unique's are)
            raise ValueError(f"identity file {self.path!r}: {exc}") from None
        _unique(parsed, self.path)
        return {identity.name: (identity, digest, cn) for identity, digest, cn in parsed}

    def reload_if_changed(self, force: bool = False, strict: bool = False) -> bool:
        """Read the file again if it changed; a broken file is an error at start (``strict``),
        later it is logged and the identities in use are kept."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (0, 0)
        with self._lock:
            if not force and stamp == self._stamp:
                return False
            try:
                entries = self._parse()
            except ValueError as exc:
                if strict:
                    raise
                self._stamp = stamp  # logged once per change of the file, not at every timer tick
                log.error("identity file not reloaded, the identities in use are kept: %s", exc)
                return False
            old = self._entries
            revoked = frozenset(name for name, entry in old.items() if entries.get(name) != entry)
            self._stamp, self._entries = stamp, entries
            self._by_digest = {d: identity for identity, d, _ in entries.values() if d}
            self._by_cn = {cn: identity for identity, _, cn in entries.values() if cn}
            callbacks = list(self._callbacks)
        log.info(
            "identities loaded from %s (%d)%s",
            self.path,
            len(entries),
            f"; removed or changed: {', '.join(sorted(revoked))}" if revoked else "",
        )
        warn_if_exposed(  # at start and at each reload: the server serves all the same
            self.path, "identity file (--auth-file)", "whoever can write it can give themselves any role"
        )
        for callback in callbacks:
            try:
                callback(revoked)
            except Exception:
                log.exception("an identity reload callback failed")
        return True

    def by_token(self, token: str) -> Identity | None:
        """The identity whose token hashes to ``token``'s hash."""
        # a lookup by hash: timing can only tell about the hash, never about a token
        return self._by_digest.get(hash_token(token))

    def by_token_hash(self, digest: str) -> Identity | None:
        """The identity whose token hashes to ``digest`` (what a dashboard session keeps of its token)."""
        return self._by_digest.get(digest)

    def by_certificate(self, common_name: str) -> Identity | None:
        """The identity of a verified client certificate's common name."""
        return self._by_cn.get(common_name)

    def by_name(self, name: str) -> Identity | None:
        """The identity called ``name`` now (None: not in the file)."""
        entry = self._entries.get(name)
        return entry[0] if entry is not None else None
