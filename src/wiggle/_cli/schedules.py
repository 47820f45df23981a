"""``wiggle schedule create|update|get|list|pause|resume|delete|trigger`` (docs/semantics.md#schedules).

``add_parsers`` adds them to the ``wiggle`` parser (wiggle/_cli/parser.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .._engine.schedules import Catchup, Overlap
from ..errors import InvalidArgument
from .common import client_from_args as client_of
from .common import json_arg, print_json
from .views import when

__all__ = ["add_parsers"]

OVERLAPS = [o.value for o in Overlap]
CATCHUPS = [c.value for c in Catchup]


def show(s: Any) -> None:
    every = f"every {s.interval_seconds:g} s" if s.interval_seconds else f"cron '{s.cron}' {s.timezone}"
    state = "paused" if s.paused else "active"
    print(f"schedule   {s.schedule_id} ({state})")
    print(f"workflow   {s.workflow}" + (f" (version {s.version})" if s.version else ""))
    print(f"when       {every}; overlap {s.overlap}; catch-up {s.catchup}")
    print(f"fired      {s.fired}  skipped {s.skipped}  last {s.last_instance_id or '-'}")
    print("next       " + (", ".join(when(t) for t in s.next_fire_times) or "-"))


def spec(args: argparse.Namespace) -> dict[str, Any]:
    if bool(args.every) == bool(args.cron):
        raise InvalidArgument("give exactly one of --every SECONDS and --cron EXPR")
    return {
        "context": json_arg(args.context, "--context") or {},
        "every": args.every,
        "cron": args.cron or "",
        "timezone": args.timezone,
        "version": args.version or "",
        "overlap": args.overlap.upper(),
        "catchup": args.catchup.upper(),
        "catchup_limit": args.catchup_limit,
    }


def create(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        s = client.create_schedule(args.schedule_id, args.workflow, paused=args.paused, **spec(args))
        print_json(s) if args.json else show(s)
    return 0


def update(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        s = client.update_schedule(args.schedule_id, args.workflow, **spec(args))
        print_json(s) if args.json else show(s)
    return 0


def list_(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        found = client.list_schedules(args.workflow or "")
        if args.json:
            print_json(found)
            return 0
        print(f"{'SCHEDULE':<24} {'WORKFLOW':<20} {'WHEN':<32} {'NEXT':<24} FIRED")
        for s in found:
            nxt = when(s.next_fire_times[0]) if s.next_fire_times else "paused"
            every = (
                f"every {s.interval_seconds:g}s" if s.interval_seconds else f"cron {s.cron!r} {s.timezone}"
            )
            print(f"{s.schedule_id:<24} {s.workflow:<20} {every:<32} {nxt:<24} {s.fired}")
    return 0


def one(method: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with client_of(args) as client:
            s = getattr(client, method)(args.schedule_id)
            print_json(s) if args.json else show(s)
        return 0

    return run


def delete(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        client.delete_schedule(args.schedule_id)
        print(f"{args.schedule_id}: deleted")
    return 0


def trigger(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        info = client.trigger_schedule(args.schedule_id)
        print_json(info) if args.json else print(info.instance_id)
    return 0


def add_parsers(sub: Any) -> None:
    """Add the ``schedule`` command and its verbs to the ``wiggle`` parser's subparsers ``sub``."""
    p = sub.add_parser("schedule", help="start instances on an interval or a cron expression")
    verbs = p.add_subparsers(dest="verb", required=True)
    for name, func, text in (
        ("create", create, "create a schedule"),
        ("update", update, "replace a schedule's spec"),
    ):
        v = verbs.add_parser(name, help=text)
        v.add_argument("schedule_id")
        v.add_argument("workflow")
        v.add_argument("--every", type=float, help="interval in seconds")
        v.add_argument("--cron", help="5-field cron expression, e.g. '0 3 * * *'")
        v.add_argument("--timezone", default="UTC", help="IANA time zone of --cron (default UTC)")
        v.add_argument("--context", help="JSON object (or @file) given to every instance")
        v.add_argument("--version", dest="version", help="pin a workflow version (default: latest)")
        v.add_argument(
            "--overlap",
            default="SKIP",
            type=str.upper,
            choices=OVERLAPS,
            help="when a tick finds one running",
        )
        v.add_argument("--catchup", default="NONE", type=str.upper, choices=CATCHUPS, help="missed ticks")
        v.add_argument("--catchup-limit", type=int, default=0, help="ALL: the most missed ticks started")
        if name == "create":
            v.add_argument("--paused", action="store_true", help="create paused")
        v.set_defaults(func=func)
    v = verbs.add_parser("list", help="list schedules with their next fire times")
    v.add_argument("--workflow")
    v.set_defaults(func=list_)
    for name, method, text in (
        ("get", "get_schedule", "show a schedule"),
        ("pause", "pause_schedule", "pause a schedule"),
        ("resume", "resume_schedule", "resume a paused schedule"),
    ):
        v = verbs.add_parser(name, help=text)
        v.add_argument("schedule_id")
        v.set_defaults(func=one(method))
    v = verbs.add_parser("delete", help="delete a schedule (its instances stay)")
    v.add_argument("schedule_id")
    v.set_defaults(func=delete)
    v = verbs.add_parser("trigger", help="start one instance of a schedule now; prints its id")
    v.add_argument("schedule_id")
    v.set_defaults(func=trigger)
