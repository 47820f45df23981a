"""The ``wiggle`` operator verbs: doctor, workflows, queues, describe, token, bench."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from .._limits import MAX_COUNT, MAX_RATE_PERIOD_MILLIS
from ..errors import InvalidArgument
from .common import checked_target, client_from_args, print_json

__all__ = ["cmd_doctor", "cmd_workflows", "cmd_queues", "cmd_describe", "cmd_token", "cmd_bench"]


def cmd_doctor(args: argparse.Namespace) -> int:
    from .._server.config import ServerConfig, server_variable
    from .ops import doctor_checks

    database_url = args.database_url or server_variable("database_url")
    schema = args.database_schema or server_variable("database_schema") or ServerConfig().database_schema
    if args.no_server and not database_url:
        raise InvalidArgument(
            "--no-server leaves the database alone to check: give --database-url (WIGGLE_DATABASE_URL)"
        )
    target = args.target if args.no_server else checked_target(args)
    checks = doctor_checks(target, database_url, schema, server=not args.no_server)
    if args.json:
        # "ok" stays what it was, not a failure (scripts test it); "checked" false marks what
        # was not there to check (an optional extra not installed, the schema without a URL)
        print_json(
            [
                {"check": name, "ok": ok is not False, "checked": ok is not None, "detail": detail}
                for name, ok, detail in checks
            ]
        )
    else:
        print(f"{'CHECK':<18} {'OK':<4} DETAIL")
        for name, ok, detail in checks:
            print(f"{name:<18} {_OK_COLUMN[ok]:<4} {detail}")
    # a check not made (ok None) is no failure: only a failed one makes the exit code 1
    return 1 if any(ok is False for _, ok, _ in checks) else 0


#: doctor's OK column: passed, failed, or not there to check ("-", e.g. an optional extra not installed)
_OK_COLUMN = {True: "yes", False: "NO", None: "-"}


def cmd_workflows(args: argparse.Namespace) -> int:
    from .ops import print_workflows

    with client_from_args(args) as client:
        items = client.list_workflows(args.name or "")
        if args.json:
            print_json(items)
        else:
            print_workflows(items, sys.stdout)
    return 0


def cmd_queues(args: argparse.Namespace) -> int:
    from .ops import print_queues

    with client_from_args(args) as client:
        items = client.queues()
        if args.json:
            print_json(items)
        else:
            print_queues(items, sys.stdout)
    return 0


def cmd_set_limit(args: argparse.Namespace) -> int:
    """``wiggle queues set-limit``: a queue's limits (docs/flow-control.md#queue-limits)."""
    given = args.max_running is not None or args.rate is not None
    if args.clear and given:
        raise InvalidArgument("--clear removes the queue's limits: drop --max-running and --rate")
    if not args.clear and not given:
        raise InvalidArgument(
            "say what to limit: --max-running N and/or --rate N/PERIOD (e.g. 50/1s), or --clear to remove the limits"
        )
    if args.max_running is not None and not 1 <= args.max_running <= MAX_COUNT:
        raise InvalidArgument(
            f"--max-running {args.max_running} limits nothing: give N from 1 to {MAX_COUNT} "
            "(steps running at once), or --clear to remove the queue's limits"
        )
    rate_max, period = 0, None
    if args.rate is not None:
        rate_max, period = _rate_arg(args.rate)
    with client_from_args(args) as client:
        client.set_queue_limit(
            args.queue, max_running=args.max_running or 0, rate_max=rate_max, rate_period=period
        )
        items = [q for q in client.queues() if q.queue == args.queue]
    if args.json:
        print_json(items)
    else:
        from .ops import print_queues

        print_queues(items, sys.stdout)
    return 0


def _rate_arg(text: str) -> tuple[int, timedelta]:
    """``--rate N/PERIOD`` (``50/1s``, ``600/1m``, ``10/h``: a unit alone is one of it) as
    (N, PERIOD); InvalidArgument quoting what was typed and saying what is allowed."""
    allowed = f"N from 1 to {MAX_COUNT} claims per PERIOD from 1ms to 1d, e.g. 50/1s, 600/1m, 10/h"
    count, slash, per = text.partition("/")
    count, per = count.strip(), per.strip()
    if not slash or not count.isdigit() or not per:
        raise InvalidArgument(f"--rate {text!r} is not N/PERIOD: {allowed}")
    if not 1 <= int(count) <= MAX_COUNT:
        raise InvalidArgument(
            f"--rate {text!r} allows no claims: N must be from 1 to {MAX_COUNT} (e.g. 50/1s), "
            "or --clear to remove the queue's limits"
        )
    lowered = per.lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if lowered.endswith(u)), "")
    number = lowered[: len(lowered) - len(unit)] if unit else lowered
    try:  # a unit alone is one of it (10/h); a number alone is seconds, as every duration flag
        float(number or "1")  # what float takes (not "1,5"), as before; counted exactly below
        millis: Decimal | None = Decimal(number or "1") * _MILLIS[unit or "s"]
    except (ValueError, InvalidOperation):
        millis = None
    if millis is None or not millis.is_finite():
        raise InvalidArgument(
            f"--rate {text!r}: the period {per!r} is not a duration: a number with ms, s, m, h or d, "
            f"or the unit alone ({allowed})"
        )
    # exactly, not rounded: 1/0.6ms ran as 1 ms and 1/1.6ms as 2 ms (an outside trial)
    if not 1 <= millis <= MAX_RATE_PERIOD_MILLIS:
        raise InvalidArgument(f"--rate {text!r}: the period must be from 1ms to 1d ({allowed})")
    if millis != millis.to_integral_value():
        raise InvalidArgument(
            f"--rate {text!r}: the period is {millis.normalize():f} ms; give a whole number of "
            f"milliseconds (rates are counted in them), e.g. {math.floor(millis)}ms or {math.ceil(millis)}ms"
        )
    return int(count), timedelta(milliseconds=int(millis))


_MILLIS = {
    "ms": Decimal(1),
    "s": Decimal(1000),
    "m": Decimal(60_000),
    "h": Decimal(3_600_000),
    "d": Decimal(86_400_000),
}


def cmd_describe(args: argparse.Namespace) -> int:
    from .ops import describe

    with client_from_args(args) as client:
        info = client.get_workflow(args.workflow, args.version or "")
        if args.json:
            print_json(info)
        else:
            describe(info, sys.stdout)
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from .._security.tokens import check_identity, hash_token, new_token

    token = new_token()
    entry: dict[str, Any] = {
        "name": args.name,
        "roles": args.role or ["client"],
        "token_sha256": hash_token(token),
    }
    if args.queue:
        entry["queues"] = args.queue
    try:  # the rule a server applies to its --auth-file: an entry it would refuse is not printed
        check_identity(entry)
    except ValueError as exc:
        said = str(exc).split(": ", 1)[-1]  # "identity #1: ..." / "identity 'w': ..." names no file here
        hint = " (--queue NAME, repeatable, or --queue '*')" if "lists the queues" in said else ""
        raise InvalidArgument(f"wiggle token {args.name!r}: {said}{hint}") from None
    if args.json:  # as every verb's --json: one JSON document, here the token and its entry
        print(json.dumps({"token": token, "identity": entry}, indent=2))
        return 0
    print(f"token (give it to the caller; it is not stored): {token}")
    print('identity (add it to the --auth-file\'s "identities" list):')
    print(json.dumps(entry))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .._bench import e2e

    return int(e2e.main(args.bench_args))


def _verb(sub: Any, name: str, help: str, description: str, examples: list[str], **kw: Any) -> Any:
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help, description=description, epilog=epilog, **kw)


def add_parsers(sub: Any) -> None:
    """Add ``token``, ``doctor``, ``ready``, ``workflows``, ``queues``, ``describe`` and ``bench``."""
    _add_token(sub)
    _add_doctor(sub)
    _add_workflows(sub)
    _add_queues(sub)
    _add_describe(sub)
    _add_bench(sub)


def _add_token(sub: Any) -> None:
    p = _verb(
        sub,
        "token",
        "make a bearer token and its --auth-file identity entry",
        "Make a new random bearer token and print it with the identity entry to add to the "
        "server's --auth-file (which stores only the token's hash). Roles (docs/security.md): "
        "admin (everything: register, cancel, retry, schedules, queue limits), client (start "
        "instances, complete user tasks, send signals, read; not cancel, retry or schedules), "
        "worker (poll and report on its --queue queues only), viewer (read, /metrics, the "
        'dashboard). --json prints {"token", "identity"}.',
        [
            "wiggle token ops-alice --role admin",
            "wiggle token billing-worker --role worker --queue payments --queue refunds",
            "wiggle token billing-svc --role client --json",
        ],
    )
    p.add_argument("name", help="the identity's name (a worker's ids are prefixed with it)")
    p.add_argument(
        "--role",
        action="append",
        choices=["admin", "client", "worker", "viewer"],
        help="a role of the identity (repeatable; default client)",
    )
    p.add_argument("--queue", action="append", help="a queue a worker may serve (repeatable; * for all)")
    p.set_defaults(func=cmd_token)


def _add_doctor(sub: Any) -> None:
    p = _verb(
        sub,
        "doctor",
        "check the server, the schema, the extras and the hot-path implementation",
        "Check that the server at --target answers (unless --no-server), that the database schema "
        "is current (with --database-url), which extras are installed and which hot-path implementation is "
        "active. Exit 1 if a check fails.",
        [
            "wiggle doctor",
            "wiggle --target wiggle-1:7233 doctor --database-url postgresql://wiggle@db/wiggle",
            "wiggle doctor --no-server --database-url postgresql://wiggle@db/wiggle",
        ],
    )
    p.add_argument(
        "--no-server",
        action="store_true",
        help="check the database without a server (no --target check): e.g. after a restore, "
        "before any server starts",
    )
    p.add_argument("--database-url", default=None, help="check this database's schema (WIGGLE_DATABASE_URL)")
    p.add_argument(
        "--database-schema", default=None, help="its schema (WIGGLE_DATABASE_SCHEMA; default wiggle)"
    )
    p.set_defaults(func=cmd_doctor)

    from .health import add_ready

    add_ready(_verb(sub, *READY_HELP))


def _add_workflows(sub: Any) -> None:
    p = _verb(
        sub,
        "workflows",
        "list registered workflow versions",
        "List the registered workflow versions: name, version, execution mode, nodes, when registered.",
        ["wiggle workflows", "wiggle workflows --name orders --json"],
    )
    p.add_argument("--name", help="only this workflow's versions")
    p.set_defaults(func=cmd_workflows)


def _add_queues(sub: Any) -> None:
    p = _verb(
        sub,
        "queues",
        "queues: ready depth, oldest ready step, workers polling",
        "Every queue with work or limits: steps ready, delayed, running and in local runs, the age "
        "of the oldest ready step, and the workers polling it (as the answering server sees them); "
        "under a queue with limits a 'limits:' line: its max running and how many are in use, its "
        "rate and until when it holds steps back, the steps holding and waiting for a key's slot.",
        ["wiggle queues", "watch -n 5 wiggle queues", "wiggle queues set-limit payments --rate 50/1s"],
    )
    p.set_defaults(func=cmd_queues)
    verbs = p.add_subparsers(dest="queues_verb", metavar="{set-limit}")
    limit = _verb(
        verbs,
        "set-limit",
        "limit a queue: steps running at once, claims per period (cluster-wide, durable)",
        "Limit a queue on every server sharing the store: at most --max-running of its steps "
        "running at once, at most N claims per PERIOD (--rate N/PERIOD; a burst of N, then one "
        "every PERIOD/N). Steps over a limit wait READY. --clear removes the queue's limits. "
        "See docs/flow-control.md#queue-limits.",
        [
            "wiggle queues set-limit payments --max-running 20",
            "wiggle queues set-limit stripe-calls --rate 50/1s",
            "wiggle queues set-limit payments --clear",
        ],
    )
    limit.add_argument("queue", help="the queue's name")
    limit.add_argument("--max-running", type=int, metavar="N", help="at most N of its steps running at once")
    limit.add_argument("--rate", metavar="N/PERIOD", help="at most N claims per PERIOD (e.g. 50/1s, 600/1m)")
    limit.add_argument("--clear", action="store_true", help="remove the queue's limits")
    limit.set_defaults(func=cmd_set_limit)


def _add_describe(sub: Any) -> None:
    p = _verb(
        sub,
        "describe",
        "a workflow's graph as text",
        "A registered workflow's graph as text: one line per node with its kind, queue, retry "
        "policy and edges.",
        ["wiggle describe orders", "wiggle describe orders --version 3f2a9c1e0b7d --json"],
    )
    p.add_argument("workflow", help="the workflow's name")
    p.add_argument("--version", dest="version", help="a version (default: the latest)")
    p.set_defaults(func=cmd_describe)


def _add_bench(sub: Any) -> None:
    p = _verb(
        sub,
        "bench",
        "the end-to-end benchmark (see bench/README.md)",
        "The end-to-end benchmark: a server, worker processes and a workload; `wiggle bench "
        "--help` lists its own options.",
        ["wiggle bench --modes SERVER,LOCAL_SYNC --instances 1000"],
        add_help=False,
    )
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_bench)


READY_HELP = (
    "ready",
    "ask a server's /readyz (a container's or an orchestrator's health check)",
    "Ask a server's HTTP port whether it is ready (/readyz: the gRPC port serves, the store "
    "answers, the schema is current). Exit 0 when ready, 1 when not (its detail on stderr), 5 "
    "when nothing answers. Without --url it asks this machine's --http-port (WIGGLE_HTTP_PORT), "
    "over HTTPS when the server's own WIGGLE_TLS_CERT is set; the token flags (WIGGLE_TOKEN, "
    "WIGGLE_TOKEN_FILE) give the credential an identity file asks for.",
    [
        "wiggle ready --http-port 9464",
        "wiggle ready --url https://wiggle-1.internal:9464/readyz --tls-ca /etc/wiggle/ca.pem",
        'HEALTHCHECK CMD ["wiggle", "ready"]      (deploy/Dockerfile)',
    ],
)
