"""No accidental exposure: the server's security settings are checked, and built, before it binds.

A server bound to a loopback address is reachable from this machine only; anything else is
reachable from the network, and is refused without both TLS and authentication unless
``--insecure`` says so explicitly (docs/semantics.md#security).
"""

from __future__ import annotations

import ipaddress

import msgspec

from .._security.tls import ServerTLS
from .._security.tokens import IdentityTable
from ..errors import FailedPrecondition
from .config import ServerConfig
from .guard import Authenticator

__all__ = ["Security", "is_loopback", "build_security"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


class Security(msgspec.Struct, kw_only=True):
    """The server's TLS material and authenticator (each None when off)."""

    tls: ServerTLS | None = None
    identities: IdentityTable | None = None
    authenticator: Authenticator | None = None

    def reload_if_changed(self, force: bool = False) -> None:
        """Check the certificate and identity files (on SIGHUP and on a timer)."""
        if self.tls is not None:
            self.tls.reload_if_changed(force)
        if self.identities is not None:
            self.identities.reload_if_changed(force)


def build_security(config: ServerConfig) -> Security:
    """Load the TLS and identity files named by ``config`` and refuse an exposed bind.

    Raises FailedPrecondition with a message naming the flags to set.
    """
    try:
        tls = None
        if config.tls_cert or config.tls_key or config.tls_client_ca:
            tls = ServerTLS(config.tls_cert, config.tls_key, config.tls_client_ca)
        identities = (
            IdentityTable(config.auth_file, proxied=bool(config.http_trusted_header))
            if config.auth_file
            else None
        )
    except ValueError as exc:
        raise FailedPrecondition(str(exc)) from None
    if identities is not None and tls is None:
        raise FailedPrecondition(
            "--auth-file needs TLS so tokens never cross the network in clear: set --tls-cert and --tls-key"
        )
    mutual = tls is not None and tls.mutual
    authenticator = Authenticator(identities, mutual) if (identities is not None or mutual) else None
    exposed = [h for h in (config.host,) if not is_loopback(h)]
    if exposed and not config.insecure and (tls is None or authenticator is None):
        missing = []
        if tls is None:
            missing.append("TLS (--tls-cert and --tls-key)")
        if authenticator is None:
            missing.append("authentication (--auth-file, or --tls-client-ca for client certificates)")
        raise FailedPrecondition(
            f"refusing to serve on {config.host!r}, a non-loopback address, without "
            + " and ".join(missing)
            + "; set them, bind 127.0.0.1, or pass --insecure (WIGGLE_INSECURE=1) to accept the exposure"
        )
    return Security(tls=tls, identities=identities, authenticator=authenticator)
