"""The ``wiggle`` command's parser: the options every verb takes, then each verb group's own.

Each module of this package adds its verbs next to their handlers (``add_parsers``); this one
puts them together, in the order ``wiggle --help`` lists them.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .._version import __version__
from . import admin, instances, schedules, server, worker

__all__ = ["build_parser"]

#: The verb groups, in the order of ``wiggle --help``.
GROUPS = (
    server.add_parsers,
    worker.add_parsers,
    instances.add_parsers,
    schedules.add_parsers,
    admin.add_parsers,
)


def _impl_line() -> str:
    from .. import _fast

    return f"hot paths: {_fast.IMPL} ({_fast.IMPL_REASON})"


def _parser_with(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """A subcommand parser class that also accepts ``common``'s options (not for ``bench``)."""

    class SubParser(argparse.ArgumentParser):
        def __init__(self, **kwargs: Any) -> None:
            if kwargs.get("add_help", True):
                kwargs["parents"] = [*kwargs.get("parents", []), common]
            super().__init__(**kwargs)

    return SubParser


def build_parser() -> argparse.ArgumentParser:
    """The ``wiggle`` parser: global options, then every verb group's verbs."""
    parser = argparse.ArgumentParser(
        prog="wiggle", description="Wiggle for Python: a durable workflow engine."
    )
    parser.add_argument("--version", action="version", version=f"wiggle {__version__}; {_impl_line()}")
    parser.add_argument(
        "--target",
        default=os.environ.get("WIGGLE_TARGET", "127.0.0.1:7233"),
        help="server host:port, or several comma-separated for fail-over (WIGGLE_TARGET)",
    )
    # the client's TLS and token (wiggle/_security/credentials.py); unset: the WIGGLE_* variable
    parser.add_argument("--tls-ca", default=None, help="CA of the server's certificate (WIGGLE_TLS_CA)")
    parser.add_argument(
        "--client-cert", default=None, help="client certificate for mTLS (WIGGLE_TLS_CLIENT_CERT)"
    )
    parser.add_argument("--client-key", default=None, help="its private key (WIGGLE_TLS_CLIENT_KEY)")
    parser.add_argument(
        "--token-file", default=None, help="file holding a bearer token (WIGGLE_TOKEN_FILE; or WIGGLE_TOKEN)"
    )
    parser.add_argument(
        "--tls-server-name",
        default=None,
        help="name to check the server certificate against (WIGGLE_TLS_SERVER_NAME)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    # The same options after the subcommand too (`wiggle list --target h:1 --json`): SUPPRESS
    # leaves the value given before the subcommand (or the default) when they are absent.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--target", default=argparse.SUPPRESS, help="server host:port (WIGGLE_TARGET)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_parser_with(common))

    for add in GROUPS:
        add(sub)
    return parser
