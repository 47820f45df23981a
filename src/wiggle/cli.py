"""The ``wiggle`` command: run a server, a demo, and operate instances from a shell.

Exit codes: 0 success; 1 the instance FAILED or was CANCELLED (``start --wait``) or another
error; 2 bad arguments (INVALID_ARGUMENT); 3 not found; 4 refused by the state
(FAILED_PRECONDITION); 5 server unreachable or unavailable (for ``server`` and ``migrate``, their
database); 6 still running when ``--wait``'s ``--timeout`` passed. Usage errors (argparse) are
one line on stderr, exit 2. ``EXIT_CODES`` maps the ``wiggle.errors.ErrorCode`` of an error to
its exit code.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys

from ._cli.admin import cmd_bench
from ._cli.parser import build_parser
from ._env import EnvError, impl_choice
from .errors import ErrorCode, WiggleError

__all__ = ["main", "build_parser", "EXIT_CODES", "DATABASE_VERBS"]

EXIT_CODES = {
    ErrorCode.INVALID_ARGUMENT: 2,
    ErrorCode.NOT_FOUND: 3,
    ErrorCode.FAILED_PRECONDITION: 4,
    ErrorCode.UNAVAILABLE: 5,
    ErrorCode.DEADLINE_EXCEEDED: 5,
}


#: The verbs whose UNAVAILABLE is their database's, never a server's: they reach no server, so
#: the hint names the database they tried (and --database-url), not --target.
DATABASE_VERBS = ("server", "migrate")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wiggle`` command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":  # every later argument belongs to the benchmark's own parser
        return cmd_bench(argparse.Namespace(bench_args=argv[1:]))
    try:
        # the parser imports the hot paths (--version names them), which read WIGGLE_IMPL at
        # import and could only raise ImportError: a bad value is refused here first, in one line
        impl_choice()
        parser = build_parser()
    except EnvError as exc:
        print(f"wiggle: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        if not str(exc).startswith("WIGGLE_IMPL="):  # a missing module: a traceback, as ever
            raise
        print(f"wiggle: {exc}", file=sys.stderr)  # cython asked for, not built (wiggle/_fast)
        return 2
    args = parser.parse_args(argv)
    args.argv = argv  # as given: `wiggle worker --processes N` runs N copies of the rest
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except BrokenPipeError:
        # `wiggle list | head`: the reader left. Point stdout at /dev/null so the interpreter's
        # own flush at exit does not fail again, and exit as a process killed by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except WiggleError as exc:
        url = _database_url(args)
        text = str(exc)
        if url and url in text:  # a message quoting the string libpq could not read: not its password
            from ._server.config import without_password

            text = text.replace(url, without_password(url))
        print(f"wiggle: {exc.code.name}: {text}{_hint(args, exc, url)}", file=sys.stderr)
        return EXIT_CODES.get(exc.code, 1)
    except EnvError as exc:  # a malformed WIGGLE_* variable: bad input
        print(f"wiggle: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _database_url(args: argparse.Namespace) -> str:
    """The database URL a verb that takes one was given (--database-url, else
    WIGGLE_DATABASE_URL); "" for the others, and when none is set."""
    if not hasattr(args, "database_url"):
        return ""
    from ._server.config import server_variable

    return str(args.database_url or server_variable("database_url"))


#: What PostgreSQL says when it runs and refuses a login: a database or role that does not exist,
#: a wrong password, no pg_hba.conf line. The hint asked "is PostgreSQL running at ...?" after
#: `FATAL: database "trial_c_nodb" does not exist` (an outside trial).
_REFUSED_LOGIN = re.compile(
    r'FATAL: +(database "[^"]*" does not exist|role "[^"]*" does not exist|password authentication '
    r"failed|no pg_hba\.conf entry|.*authentication failed)"
)


def _hint(args: argparse.Namespace, exc: WiggleError, url: str) -> str:
    """Where an UNAVAILABLE verb looked, and the setting that chose it: the database for
    ``DATABASE_VERBS`` (and any "database unavailable"), the server at --target for the rest
    (not ``ready``, whose message names the URL it asked)."""
    if exc.code is not ErrorCode.UNAVAILABLE:
        return ""
    if "too many clients" in str(exc):  # PostgreSQL answered: it is running, and full
        return (
            " (PostgreSQL is running but every connection it allows is in use: raise its "
            "max_connections, or lower the servers' --pool-size / WIGGLE_POOL_SIZE)"
        )
    if args.command in DATABASE_VERBS or str(exc).startswith("database unavailable"):
        if not url:
            return ""
        from ._server.config import database_address

        if _REFUSED_LOGIN.search(str(exc)):  # PostgreSQL answered: it runs, and refused this login
            return (
                f" (PostgreSQL at {database_address(url)} answered and refused this connection: check "
                "the database name, role and password in --database-url or WIGGLE_DATABASE_URL)"
            )

        return (
            f" (is PostgreSQL running at {database_address(url)}? "
            "Choose another with --database-url or WIGGLE_DATABASE_URL)"
        )
    if not getattr(args, "target", None) or args.command == "ready":
        return ""
    if "a TLS problem" in str(exc):  # the client said what to check (wiggle/_client/tls_trouble.py)
        return ""
    if "is a `wiggle server` running at" in str(exc):  # the client said where it looked
        return " (choose another with --target or WIGGLE_TARGET)"
    return f" (is a `wiggle server` running at {args.target}? Choose another with --target or WIGGLE_TARGET)"


if __name__ == "__main__":
    sys.exit(main())
