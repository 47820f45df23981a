"""What a client or a worker presents to a server: the CA it trusts, its certificate, its token.

Every value comes from an argument or, when the argument is not given, from a WIGGLE_*
variable (``Credentials.from_env``), so the CLI, ``Client``, ``AsyncClient`` and ``Worker``
agree on the names. A token is only ever sent over TLS (docs/semantics.md#security).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import msgspec

from .._env import environment
from ..errors import InvalidArgument

__all__ = ["Credentials", "ENV_VARS", "check_credentials"]

#: Credentials field -> the environment variable it is read from.
ENV_VARS: dict[str, str] = {
    "ca_file": "WIGGLE_TLS_CA",
    "cert_file": "WIGGLE_TLS_CLIENT_CERT",
    "key_file": "WIGGLE_TLS_CLIENT_KEY",
    "token": "WIGGLE_TOKEN",
    "token_file": "WIGGLE_TOKEN_FILE",
    "server_name": "WIGGLE_TLS_SERVER_NAME",
}


def _metadata_safe(token: str, where: str) -> str:
    """``token`` if gRPC can send it in the ``authorization`` metadata (printable ASCII, as
    ``wiggle token`` makes them); else InvalidArgument naming ``where`` and the first character
    it cannot, never the token (gRPC refused such a value at each call as "Illegal metadata",
    which the client took for a server away, naming neither the token nor where it came from)."""
    for position, char in enumerate(token):
        if not " " <= char <= "~":
            what = "a line break" if char in "\r\n" else f"the character U+{ord(char):04X}"
            raise InvalidArgument(
                f"{where} holds {what} at position {position} of the token, which gRPC cannot send: "
                "a token is one line of printable ASCII, as `wiggle token` prints it; write the "
                "token alone on one line"
            )
    return token


def _trimmed(text: str) -> str:
    """``text`` without the whitespace around it and a byte order mark before it (U+FEFF is no
    whitespace to ``str.strip``)."""
    return text.strip().lstrip("\ufeff").strip()


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from None


class Credentials(msgspec.Struct, frozen=True, kw_only=True):
    """A client's TLS and token settings; all empty means a plaintext channel without a token.

    Each field not given is read from its variable (``ENV_VARS``, ``Credentials.from_env``).

    Attributes:
        ca_file: PEM bundle of the CA that signed the server's certificate (turns TLS on).
        cert_file: The client certificate (PEM), for a server that requires mTLS.
        key_file: The private key of `cert_file`.
        token: A bearer token, sent on every call (only ever over TLS).
        token_file: A file holding the bearer token (read when the channel is made).
        server_name: The name to check the server's certificate against when the target is an
            address (several addresses for fail-over, or an IP).
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    token: str = ""
    token_file: str = ""
    server_name: str = ""

    def __repr__(self) -> str:
        # a token is a secret: repr (and str, f-strings, logs of a Credentials) say only whether
        # one is set; file paths are not secrets and help a person tell which files are used
        shown = [
            f"{name}={getattr(self, name)!r}"
            for name in ("ca_file", "cert_file", "key_file", "token_file", "server_name")
            if getattr(self, name)
        ]
        if self.token:
            shown.append("token=<hidden>")
        return f"Credentials({', '.join(shown)})"

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        # msgspec gives every Struct a rich repr of all its fields: this one hides the token too
        shown: list[tuple[str, Any]] = [
            (name, getattr(self, name))
            for name in ("ca_file", "cert_file", "key_file", "token_file", "server_name")
            if getattr(self, name)
        ]
        if self.token:
            shown.append(("token", "<hidden>"))
        return shown

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: str | None) -> Credentials:
        """``given`` values (None: not given) over the WIGGLE_TLS_* / WIGGLE_TOKEN* variables."""
        env = environment() if env is None else env
        values: dict[str, str] = {}
        for field, var in ENV_VARS.items():
            value = given.get(field)
            values[field] = value if value is not None else env.get(var, "").strip()
        return cls(**values)

    @property
    def tls(self) -> bool:
        """Whether the channel uses TLS."""
        return bool(self.ca_file or self.cert_file)

    def bearer(self) -> str:
        """The token to send ('' for none): ``token``, else the content of ``token_file``, without
        the whitespace around it nor a UTF-8 byte order mark (which some editors write);
        InvalidArgument, naming the setting, for a token gRPC could not send (a line break or
        another character that is not printable ASCII inside it)."""
        if self.token:
            return _metadata_safe(_trimmed(self.token), "the token (token, WIGGLE_TOKEN)")
        if self.token_file:
            text = _trimmed(_read(self.token_file, "token file").decode("utf-8", "replace"))
            where = f"the token file {self.token_file!r} (token_file, WIGGLE_TOKEN_FILE)"
            if not text:  # else no token was sent, and the server said "no credential"
                raise InvalidArgument(
                    f"{where} is empty: write the token in it (`wiggle token` prints one), or unset it"
                )
            return _metadata_safe(text, where)
        return ""

    def check(self) -> None:
        """Raise InvalidArgument (a ValueError) naming the setting when the combination cannot
        work: the CLI then says it in one line, whichever command (``wiggle worker`` printed a
        traceback)."""
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidArgument(
                "a client certificate needs both cert_file and key_file "
                "(WIGGLE_TLS_CLIENT_CERT and WIGGLE_TLS_CLIENT_KEY)"
            )
        if (self.token or self.token_file) and not self.tls:
            raise InvalidArgument(
                "a token is only sent over TLS: set ca_file (WIGGLE_TLS_CA) to the CA of the "
                "server's certificate"
            )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """gRPC channel credentials (TLS, plus the token as call credentials), or None for plaintext."""
        self.check()
        if not self.tls:
            return None
        if self.cert_file:
            self._check_pair()
        secure = grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "CA file") if self.ca_file else None,
            private_key=_read(self.key_file, "client key") if self.key_file else None,
            certificate_chain=_read(self.cert_file, "client certificate") if self.cert_file else None,
        )
        token = self.bearer()
        if not token:
            return secure
        return grpc.composite_channel_credentials(secure, grpc.access_token_call_credentials(token))

    def _check_pair(self) -> None:
        """InvalidArgument naming the files unless ``cert_file`` and ``key_file`` are a PEM
        certificate and its unencrypted private key: gRPC finds out only at each connection, says
        "Failed to create security handshaker" (and "Invalid private key." on stderr), and the
        client took that for a server away."""
        _read(self.cert_file, "client certificate")
        _read(self.key_file, "client key")
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
                self.cert_file,
                self.key_file,
                password=lambda: b"",  # gRPC takes no encrypted key
            )
        except ssl.SSLError as exc:
            raise InvalidArgument(
                f"the client certificate {self.cert_file!r} and key {self.key_file!r} (cert_file and "
                "key_file, WIGGLE_TLS_CLIENT_CERT and WIGGLE_TLS_CLIENT_KEY, --client-cert and "
                f"--client-key) are not a PEM certificate and its unencrypted private key "
                f"({exc.reason or exc}): give the key made with that certificate"
            ) from None

    def channel_options(self) -> list[tuple[str, str]]:
        """Extra channel options: the certificate name to check when ``server_name`` is set."""
        if self.server_name and self.tls:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


def check_credentials(credentials: object) -> None:
    """TypeError unless ``credentials`` is None (the WIGGLE_* variables) or a Credentials: a client
    or a worker given a token or a dict of its fields met "'str' object has no attribute
    'channel_credentials'" (wiggle/_client/aio.py, wiggle/_worker/worker.py)."""
    if credentials is not None and not isinstance(credentials, Credentials):
        raise TypeError(
            f"credentials must be a wiggle.Credentials, got {type(credentials).__name__} "
            "(e.g. Credentials(ca_file=..., token=...))"
        )
