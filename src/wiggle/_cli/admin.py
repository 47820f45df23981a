"""The ``wiggle`` operator verbs: doctor, workflows, queues, describe, token, bench."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .common import client_from_args, print_json

__all__ = ["cmd_doctor", "cmd_workflows", "cmd_queues", "cmd_describe", "cmd_token", "cmd_bench"]


def cmd_doctor(args: argparse.Namespace) -> int:
    from .ops import doctor_checks

    database_url = args.database_url or os.environ.get("WIGGLE_DATABASE_URL", "")
    schema = args.database_schema or os.environ.get("WIGGLE_DATABASE_SCHEMA", "") or "wiggle"
    checks = doctor_checks(args.target, database_url, schema)
    if args.json:
        print_json([{"check": name, "ok": ok, "detail": detail} for name, ok, detail in checks])
    else:
        print(f"{'CHECK':<18} {'OK':<4} DETAIL")
        for name, ok, detail in checks:
            print(f"{name:<18} {'yes' if ok else 'NO':<4} {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


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
    from .._security.tokens import hash_token, new_token

    token = new_token()
    entry: dict[str, Any] = {
        "name": args.name,
        "roles": args.role or ["client"],
        "token_sha256": hash_token(token),
    }
    if args.queue:
        entry["queues"] = args.queue
    print(f"token (give it to the caller; it is not stored): {token}")
    print('identity (add it to the --auth-file\'s "identities" list):')
    print(json.dumps(entry))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .._bench import e2e

    return int(e2e.main(args.bench_args))


def add_parsers(sub: Any) -> None:
    """Add ``token``, ``doctor``, ``workflows``, ``queues``, ``describe`` and ``bench``."""
    p = sub.add_parser("token", help="make a bearer token and its --auth-file identity entry")
    p.add_argument("name", help="the identity's name (a worker's ids are prefixed with it)")
    p.add_argument(
        "--role", action="append", choices=["admin", "client", "worker", "viewer"], help="repeatable (client)"
    )
    p.add_argument("--queue", action="append", help="a queue a worker may serve (repeatable; * for all)")
    p.set_defaults(func=cmd_token)

    p = sub.add_parser(
        "doctor", help="check the server, the schema, the extras and the hot-path implementation"
    )
    p.add_argument("--database-url", default=None, help="check this database's schema (WIGGLE_DATABASE_URL)")
    p.add_argument("--database-schema", default=None)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("workflows", help="list registered workflow versions")
    p.add_argument("--name", help="only this workflow's versions")
    p.set_defaults(func=cmd_workflows)

    p = sub.add_parser("queues", help="queues: ready depth, oldest ready step, workers polling")
    p.set_defaults(func=cmd_queues)

    p = sub.add_parser("describe", help="a workflow's graph as text")
    p.add_argument("workflow")
    p.add_argument("--version", dest="version", help="a version (default: the latest)")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("bench", help="the end-to-end benchmark (see bench/README.md)", add_help=False)
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_bench)
