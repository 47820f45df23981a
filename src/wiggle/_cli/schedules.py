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
from .common import duration_arg, json_arg, print_json
from .views import when

__all__ = ["add_parsers"]

OVERLAPS = [o.value for o in Overlap]
CATCHUPS = [c.value for c in Catchup]


#: Units of an interval's plain-words form, largest first.
_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def interval(seconds: float) -> str:
    """An interval as ``every``'s seconds, in plain digits (never ``3.16224e+07``), with days,
    hours and minutes beside it from two minutes up: ``5400 s (1 h 30 min)``."""
    text = f"{seconds:.3f}".rstrip("0").rstrip(".")
    if seconds < 120:
        return f"{text} s"
    rest, parts = round(seconds), []
    for size, unit in _UNITS:
        if rest >= size:
            parts.append(f"{rest // size} {unit}")
            rest %= size
    return f"{text} s ({' '.join(parts)})"


def timing(s: Any) -> str:
    """When a schedule ticks: ``every ...`` or ``cron '...' ZONE``."""
    return f"every {interval(s.interval_seconds)}" if s.interval_seconds else f"cron '{s.cron}' {s.timezone}"


def show(s: Any) -> None:
    state = "paused" if s.paused else "active"
    print(f"schedule   {s.schedule_id} ({state})")
    print(f"workflow   {s.workflow}" + (f" (version {s.version})" if s.version else ""))
    print(f"when       {timing(s)}; overlap {s.overlap}; catch-up {s.catchup}")
    print(f"fired      {s.fired}  skipped {s.skipped}  last {s.last_instance_id or '-'}")
    if s.buffered_tick_at:  # BUFFER_ONE: it starts when the running instance finishes
        print(f"held       the tick of {when(s.buffered_tick_at)}, until the running instance finishes")
    print("next       " + (", ".join(when(t) for t in s.next_fire_times) or "-"))


def _every(text: str | None) -> float | None:
    """--every as seconds: a number of seconds, or a duration as --start-delay takes (``15m``)."""
    delta = duration_arg(text, "--every")
    if delta is not None and delta.total_seconds() <= 0:
        raise InvalidArgument(f"--every must be more than 0 seconds, got {text!r}")
    return None if delta is None else delta.total_seconds()


def _check_timezone(timezone: str | None, cron: bool) -> None:
    """--timezone names a zone, and only for a cron schedule (an interval ignores zones)."""
    if timezone is None:
        return
    if not timezone.strip():
        raise InvalidArgument("--timezone is empty; give an IANA time zone name like 'UTC' or 'Europe/Paris'")
    if not cron:
        raise InvalidArgument(
            "--timezone applies to a --cron schedule only: an --every interval ticks every so many "
            "seconds whatever the zone"
        )


def spec(args: argparse.Namespace) -> dict[str, Any]:
    if (args.every is None) == (args.cron is None):
        raise InvalidArgument("give exactly one of --every SECONDS and --cron EXPR")
    _check_timezone(args.timezone, args.cron is not None)
    return {
        "context": json_arg(args.context, "--context") or {},
        "every": _every(args.every),
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


def changed_spec(current: Any, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The workflow and spec of ``schedule update``: the schedule's ``current`` one, with what
    the flags change (--every replaces a cron, --cron an interval)."""
    if args.every is not None and args.cron is not None:
        raise InvalidArgument("give at most one of --every SECONDS and --cron EXPR")
    every = current.interval_seconds
    cron = current.cron
    if args.every is not None:
        every, cron = _every(args.every), ""
    elif args.cron is not None:
        every, cron = None, args.cron
    _check_timezone(args.timezone, bool(cron))
    context = json_arg(args.context, "--context") if args.context is not None else current.context
    given = {
        "timezone": args.timezone,
        "version": args.version,
        "overlap": args.overlap,
        "catchup": args.catchup,
        "catchup_limit": args.catchup_limit,
    }
    kept = {name: getattr(current, name) if value is None else value for name, value in given.items()}
    if not cron:  # an interval has no zone (the client refuses one): a cron's is not carried over
        kept["timezone"] = None
    workflow = args.workflow_flag or args.workflow or current.workflow
    return workflow, {"context": context, "every": every, "cron": cron, **kept}


def update(args: argparse.Namespace) -> int:
    if args.workflow and args.workflow_flag and args.workflow != args.workflow_flag:
        raise InvalidArgument(f"two workflows given: {args.workflow!r} and --workflow {args.workflow_flag!r}")
    with client_of(args) as client:
        # read, change what the flags say, write back (a concurrent update in between is replaced)
        workflow, new = changed_spec(client.get_schedule(args.schedule_id), args)
        s = client.update_schedule(args.schedule_id, workflow, **new)
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
            print(f"{s.schedule_id:<24} {s.workflow:<20} {timing(s):<32} {nxt:<24} {s.fired}")
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


def _verb(verbs: Any, name: str, help: str, description: str, examples: list[str]) -> Any:
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return verbs.add_parser(name, help=help, description=description, epilog=epilog)


def _spec_flags(v: argparse.ArgumentParser, defaults: bool) -> None:
    """The spec flags of create (with their defaults) and update (None: keep the current value)."""

    def d(value: Any) -> Any:
        return value if defaults else None

    keep = "" if defaults else " (default: unchanged)"
    v.add_argument("--every", metavar="DURATION", help="interval: seconds, or 90s, 15m, 2h, 1d" + keep)
    v.add_argument("--cron", help="5-field cron expression, e.g. '0 3 * * *'" + keep)
    v.add_argument("--timezone", help="IANA time zone of --cron" + (keep or " (default UTC)"))
    v.add_argument("--context", help="JSON object (or @file) given to every instance" + keep)
    v.add_argument(
        "--version",
        dest="version",
        default=d(None),
        help="pin a workflow version" + (keep or " (default: latest)"),
    )
    v.add_argument(
        "--overlap",
        default=d("SKIP"),
        type=str.upper,
        choices=OVERLAPS,
        help="when a tick finds one running" + (keep or " (default SKIP)"),
    )
    v.add_argument(
        "--catchup",
        default=d("NONE"),
        type=str.upper,
        choices=CATCHUPS,
        help="missed ticks" + (keep or " (default NONE)"),
    )
    v.add_argument(
        "--catchup-limit", type=int, default=d(0), help="ALL: the most missed ticks started" + keep
    )


def add_parsers(sub: Any) -> None:
    """Add the ``schedule`` command and its verbs to the ``wiggle`` parser's subparsers ``sub``."""
    p = sub.add_parser(
        "schedule",
        help="start instances on an interval or a cron expression",
        description="Schedules start instances of a workflow on an interval or a cron expression "
        "(in a time zone), with an overlap policy and catch-up of missed ticks.",
        epilog="examples:\n  wiggle schedule create nightly report --cron '0 3 * * *' --timezone Europe/Paris\n"
        "  wiggle schedule list\n  wiggle schedule update nightly --cron '30 2 * * *'",
    )
    verbs = p.add_subparsers(dest="verb", required=True)
    _add_create(verbs)
    _add_update(verbs)
    _add_list(verbs)
    _add_delete(verbs)
    _add_trigger(verbs)


def _add_create(verbs: Any) -> None:
    v = _verb(
        verbs,
        "create",
        "create a schedule",
        "Create a schedule that starts WORKFLOW with --context every --every seconds or on --cron "
        "ticks. --overlap says what a tick does while the last instance still runs (SKIP it, "
        "BUFFER_ONE, ALLOW); --catchup what happens to ticks missed while no server ran.",
        [
            "wiggle schedule create every-5-min poll-feeds --every 300",
            "wiggle schedule create nightly report --cron '0 3 * * *' --timezone Europe/Paris --overlap buffer_one",
        ],
    )
    v.add_argument("schedule_id", help="your name for the schedule")
    v.add_argument("workflow", help="the workflow it starts")
    _spec_flags(v, defaults=True)
    v.add_argument("--paused", action="store_true", help="create paused")
    v.set_defaults(func=create)


def _add_update(verbs: Any) -> None:
    v = _verb(
        verbs,
        "update",
        "change a schedule's spec (what is not given is kept)",
        "Change a schedule: each flag given replaces that part of its spec, the rest is kept "
        "(--every replaces a cron, --cron an interval). Its counts are kept and its ticks restart "
        "from now. The workflow too may change (--workflow, or as the second argument).",
        [
            "wiggle schedule update nightly --cron '30 2 * * *'",
            'wiggle schedule update every-5-min --every 60 --context \'{"region": "eu"}\'',
            "wiggle schedule update nightly --workflow report-v2",
        ],
    )
    v.add_argument("schedule_id", help="the schedule to change")
    v.add_argument("workflow", nargs="?", help="a new workflow (optional; same as --workflow)")
    v.add_argument(
        "--workflow", dest="workflow_flag", metavar="WORKFLOW", help="a new workflow (default: unchanged)"
    )
    _spec_flags(v, defaults=False)
    v.set_defaults(func=update)


def _add_list(verbs: Any) -> None:
    v = _verb(
        verbs,
        "list",
        "list schedules with their next fire times",
        "List schedules (all, or one workflow's) with when they fire, their next fire time and "
        "how many instances they started.",
        ["wiggle schedule list", "wiggle schedule list --workflow report --json"],
    )
    v.add_argument("--workflow", help="only this workflow's schedules")
    v.set_defaults(func=list_)
    for name, method, text, description in (
        ("get", "get_schedule", "show a schedule", "Show a schedule: its spec, counts and next fire times."),
        (
            "pause",
            "pause_schedule",
            "pause a schedule",
            "Pause a schedule: ticks while it is paused are dropped. Pausing a paused one changes nothing.",
        ),
        (
            "resume",
            "resume_schedule",
            "resume a paused schedule",
            "Resume a paused schedule from its next tick after now.",
        ),
    ):
        v = _verb(verbs, name, text, description, [f"wiggle schedule {name} nightly"])
        v.add_argument("schedule_id", help="the schedule's id")
        v.set_defaults(func=one(method))


def _add_delete(verbs: Any) -> None:
    v = _verb(
        verbs,
        "delete",
        "delete a schedule (its instances stay)",
        "Delete a schedule; the instances it started are not touched.",
        ["wiggle schedule delete nightly"],
    )
    v.add_argument("schedule_id", help="the schedule's id")
    v.set_defaults(func=delete)


def _add_trigger(verbs: Any) -> None:
    v = _verb(
        verbs,
        "trigger",
        "start one instance of a schedule now; prints its id",
        "Start one instance of the schedule's workflow now, with its context, whatever its overlap "
        "policy and even if paused; print the instance's id.",
        ["wiggle schedule trigger nightly", "wiggle get $(wiggle schedule trigger nightly) --history"],
    )
    v.add_argument("schedule_id", help="the schedule's id")
    v.set_defaults(func=trigger)
