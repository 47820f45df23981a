"""The server's TLS material: certificate, key and (for mTLS) the client CA, reloaded on change.

One ``ServerTLS`` serves both ports. gRPC asks ``fetch`` at every new handshake (grpc's dynamic
server credentials), so a renewed certificate is used from the next connection on without a
restart; the HTTP port's ``ssl.SSLContext`` is reloaded by ``reload_if_changed``, which the
server calls on SIGHUP and on a timer (docs/semantics.md#security). Each load warns of a key or
client CA others may change (or read) and of a certificate out of its validity (file_checks.py).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from pathlib import Path

import grpc

from .file_checks import warn_if_exposed, warn_if_out_of_date

__all__ = ["ServerTLS"]

log = logging.getLogger("wiggle.server")


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from None


class ServerTLS:
    """Certificate and key files (PEM), and optionally a client CA that makes client certificates
    required (mTLS). Construct, then ``grpc_credentials()`` for the gRPC port and
    ``ssl_context()`` for the HTTP port."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = "") -> None:
        if not cert_file or not key_file:
            raise ValueError("TLS needs both a certificate and a key (--tls-cert and --tls-key)")
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._lock = threading.Lock()
        self._stamps = self._current_stamps()
        self._material = self._load()
        self._warn()
        self._contexts: list[ssl.SSLContext] = []
        self.reloads = 0  # how many times new material was loaded: the material's generation
        self._grpc_generation = 0  # the generation gRPC was last handed

    @property
    def mutual(self) -> bool:
        """Whether client certificates are required."""
        return bool(self.client_ca_file)

    def _files(self) -> list[str]:
        return [f for f in (self.cert_file, self.key_file, self.client_ca_file) if f]

    def _current_stamps(self) -> list[tuple[int, int]]:
        return [_stamp(f) for f in self._files()]

    def _load(self) -> tuple[bytes, bytes, bytes | None]:
        cert = _read(self.cert_file, "server certificate (--tls-cert)")
        key = _read(self.key_file, "server key (--tls-key)")
        ca = _read(self.client_ca_file, "client CA (--tls-client-ca)") if self.client_ca_file else None
        # refuse a broken pair now, with the file named, rather than at the first handshake
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"--tls-cert {self.cert_file!r} / --tls-key {self.key_file!r} are not a PEM certificate "
                f"and its private key: {exc}; give the server's certificate (chain) and the key it was made for"
            ) from None
        if self.client_ca_file:  # named only when one was given: a bad pair is no CA's fault
            try:
                probe.load_verify_locations(self.client_ca_file)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"--tls-client-ca {self.client_ca_file!r} is not a PEM bundle of CA certificates: {exc}"
                ) from None
        return cert, key, ca

    def reload_if_changed(self, force: bool = False) -> bool:
        """Load the files again if they changed (or ``force``); True when new material is in use.
        A half-written or broken set is logged and the old material kept."""
        with self._lock:
            stamps = self._current_stamps()
            if not force and stamps == self._stamps:
                return False
            try:
                material = self._load()
            except ValueError as exc:
                log.warning("keeping the current TLS certificate: %s", exc)
                return False
            self._stamps = stamps
            self._material = material
            self.reloads += 1
            for context in self._contexts:
                self._configure(context)
        log.info("TLS certificate reloaded from %s", self.cert_file)
        self._warn()
        return True

    def _warn(self) -> None:
        """Warnings (the server serves all the same) about a key or client CA others may change
        or read, and a certificate out of its validity (file_checks.py)."""
        warn_if_out_of_date(self.cert_file, self._material[0])
        warn_if_exposed(
            self.key_file, "TLS key (--tls-key)", "whoever reads it can pass for this server", secret=True
        )
        if self.client_ca_file:
            warn_if_exposed(
                self.client_ca_file,
                "client CA (--tls-client-ca)",
                "whoever writes it can add a CA of their own and sign client certificates that pass",
                public=True,
            )

    # -------------------------------------------------------------- gRPC

    def _config(self) -> grpc.ServerCertificateConfiguration:
        cert, key, ca = self._material
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # called by gRPC at each new handshake; None keeps the current configuration. The
        # generation, not this call's reload, decides: the HTTP timer or SIGHUP may have loaded
        # the new files first.
        self.reload_if_changed()
        if self._grpc_generation == self.reloads:
            return None
        self._grpc_generation = self.reloads
        return self._config()

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials for ``add_secure_port``, re-reading changed files at each handshake."""
        return grpc.dynamic_ssl_server_credentials(
            self._config(), self._fetch, require_client_authentication=self.mutual
        )

    # -------------------------------------------------------------- HTTP

    def _configure(self, context: ssl.SSLContext) -> None:
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            context.load_verify_locations(self.client_ca_file)

    def ssl_context(self) -> ssl.SSLContext:
        """An ``ssl.SSLContext`` for an HTTP server (any framework); kept up to date by reloads."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_ca_file:
            context.verify_mode = ssl.CERT_REQUIRED
        self._configure(context)
        with self._lock:
            self._contexts.append(context)
        return context
