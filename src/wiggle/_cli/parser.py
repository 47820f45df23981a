"""The ``wiggle`` command's parser: the options every verb takes, then each verb group's own.

Each module of this package adds its verbs next to their handlers (``add_parsers``); this one
puts them together, in the order ``wiggle --help`` lists them.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

from .._env import setting
from .._version import __version__
from . import admin, completion, instances, schedules, server, worker

__all__ = ["build_parser"]

#: The verb groups, in the order of ``wiggle --help``.
GROUPS = (
    server.add_parsers,
    worker.add_parsers,
    instances.add_parsers,
    schedules.add_parsers,
    admin.add_parsers,
    completion.add_parsers,
)


EPILOG = """examples:
  wiggle server --database-url postgresql://wiggle@db/wiggle --http-port 9464
  wiggle worker myapp.flows:orders --concurrency 32
  wiggle start orders --context '{"order_id": "A-1"}' --wait
  wiggle completion bash > ~/.local/share/bash-completion/completions/wiggle

exit codes: 0 ok; 1 the instance FAILED or was CANCELLED (--wait), or another error; 2 bad input;
3 not found; 4 refused by the state; 5 server unreachable or unavailable; 6 still running when
--wait's --timeout passed. `wiggle VERB --help` describes each verb."""


def _impl_line() -> str:
    from .. import _fast

    return f"hot paths: {_fast.IMPL} ({_fast.IMPL_REASON})"


def _parser_with(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """A subcommand parser class that also accepts ``common``'s options (not for ``bench``)."""

    class SubParser(OneLineErrors):
        def __init__(self, **kwargs: Any) -> None:
            if kwargs.get("add_help", True):
                kwargs["parents"] = [*kwargs.get("parents", []), common]
            # descriptions and examples keep their line breaks
            kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
            super().__init__(**kwargs)

    return SubParser


#: A value that starts with a minus and a digit: a negative number, duration or rate (``-5``,
#: ``-5m``, ``-.5s``, ``-5/1s``). No option of ours is spelt so (none starts "-" and a digit).
NEGATIVE_VALUE = re.compile(r"-\.?\d")


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr, exit 2 (argparse prints the usage too).

    The line names the problem and where the usage is: ``wiggle start: error: the following
    arguments are required: workflow (see wiggle start --help)``.

    A word like ``-5m`` is a value, as argparse takes ``-5`` for one: ``--start-delay -5m`` and
    ``--rate -5/1s`` reach their own check ("--start-delay must not be negative, got '-5m'"),
    where argparse said "argument --start-delay: expected one argument" (an outside trial).
    """

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse's own test is _negative_number_matcher: only a plain number ("-5", "-1.5")
        if NEGATIVE_VALUE.match(arg_string):
            return None  # a positional word, or the value of the option before it
        return super()._parse_optional(arg_string)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``wiggle`` parser: global options, then every verb group's verbs."""
    parser = OneLineErrors(
        prog="wiggle",
        description="Wiggle for Python: a durable workflow engine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"wiggle {__version__}; {_impl_line()}")
    parser.add_argument(
        "--target",
        default=setting("WIGGLE_TARGET"),
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
