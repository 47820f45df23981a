"""The ``wiggle`` command: run a server, a demo, and operate instances from a shell.

Exit codes: 0 success; 1 the instance FAILED or was CANCELLED (``start --wait``) or another
error; 2 bad arguments (INVALID_ARGUMENT); 3 not found; 4 refused by the state
(FAILED_PRECONDITION); 5 server unreachable or unavailable; 6 still running when ``--wait``'s
``--timeout`` passed. Usage errors (argparse) are one line on stderr, exit 2. ``EXIT_CODES`` maps the
``wiggle.errors.ErrorCode`` of an error to its exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ._cli.admin import cmd_bench
from ._cli.parser import build_parser
from ._env import EnvError
from .errors import ErrorCode, WiggleError

__all__ = ["main", "build_parser", "EXIT_CODES"]

EXIT_CODES = {
    ErrorCode.INVALID_ARGUMENT: 2,
    ErrorCode.NOT_FOUND: 3,
    ErrorCode.FAILED_PRECONDITION: 4,
    ErrorCode.UNAVAILABLE: 5,
    ErrorCode.DEADLINE_EXCEEDED: 5,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wiggle`` command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":  # every later argument belongs to the benchmark's own parser
        return cmd_bench(argparse.Namespace(bench_args=argv[1:]))
    args = build_parser().parse_args(argv)
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
        hint = ""
        if exc.code is ErrorCode.UNAVAILABLE and getattr(args, "target", None) and args.command != "ready":
            if "is a `wiggle server` running at" in str(exc):  # the client said where it looked
                hint = " (choose another with --target or WIGGLE_TARGET)"
            else:
                hint = f" (is a `wiggle server` running at {args.target}? Choose another with --target or WIGGLE_TARGET)"
        print(f"wiggle: {exc.code.name}: {exc}{hint}", file=sys.stderr)
        return EXIT_CODES.get(exc.code, 1)
    except EnvError as exc:  # a malformed WIGGLE_* variable: bad input
        print(f"wiggle: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
