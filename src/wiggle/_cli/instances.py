"""The ``wiggle`` verbs on instances: start (one or many), get, history, cancel, list, complete-task,
signal, retry."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

import msgspec

from .._client.core import where_it_waits
from .._status import InstanceStatus
from ..errors import InvalidArgument
from .common import client_from_args, duration_arg, json_arg, print_instance, print_json, seconds_arg
from .progress import Progress, counted, wait_with_progress
from .views import when

__all__ = [
    "cmd_start",
    "cmd_start_many",
    "cmd_get",
    "cmd_history",
    "cmd_cancel",
    "cmd_list",
    "cmd_complete_task",
    "cmd_signal",
    "cmd_retry",
]


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    """The contexts of a JSON-lines file (one JSON object per line, blank lines skipped; - = stdin)."""
    contexts: list[dict[str, Any]] = []
    try:
        fh = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise InvalidArgument(f"--from-file {path}: {exc.strerror}") from None
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidArgument(f"--from-file {path} line {number} is not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise InvalidArgument(
                    f"--from-file {path} line {number} must be a JSON object, got {type(value).__name__}"
                )
            contexts.append(value)
    return contexts


#: Exit status of ``--wait`` when the instance was still running at ``--timeout``.
STILL_RUNNING = 6


def waited(info: Any, args: argparse.Namespace) -> int:
    """The exit status of a verb with ``--wait``: 0 COMPLETED, 1 FAILED or CANCELLED, 6 still
    running when ``--timeout`` passed (said on stderr); 0 without ``--wait``."""
    if not args.wait:
        return 0
    if info.status in (InstanceStatus.FAILED, InstanceStatus.CANCELLED):
        return 1
    if info.status in (InstanceStatus.RUNNING, InstanceStatus.SCHEDULED):
        where = where_it_waits(info)
        print(
            f"wiggle: {info.instance_id} still {info.status} after --timeout {args.timeout:g} s"
            + (f": {where}" if where else ""),
            file=sys.stderr,
        )
        return STILL_RUNNING
    return 0


def _moment(text: str | None) -> datetime | None:
    """--start-at: an ISO-8601 time with its zone (``Z`` or an offset)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"--start-at {text!r} is not an ISO-8601 time (e.g. 2030-01-31T18:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise InvalidArgument(f"--start-at {text!r} has no zone: add Z (UTC) or an offset such as +01:00")
    return value


def _start_options(args: argparse.Namespace) -> dict[str, Any]:
    """The flow-control options of ``wiggle start`` (docs/flow-control.md) as client keywords."""
    return {
        "priority": args.priority,
        "start_at": _moment(args.start_at),
        "start_delay": duration_arg(args.start_delay, "--start-delay"),
        "timeout": duration_arg(args.workflow_timeout, "--workflow-timeout"),
    }


def cmd_start_many(args: argparse.Namespace) -> int:
    if args.context is not None or args.wait:
        raise InvalidArgument("--from-file takes the contexts from the file: drop --context and --wait")
    if args.dedup_key is not None or args.dedup_window is not None:
        raise InvalidArgument(
            "--dedup-key is per start: drop --dedup-key and --dedup-window with --from-file"
        )
    contexts = _read_jsonl(args.from_file)
    if not contexts:
        raise InvalidArgument(f"--from-file {args.from_file} holds no contexts (one JSON object per line)")
    progress = Progress(args)
    try:
        with client_from_args(args) as client:
            ids = client.start_many(
                args.workflow,
                counted(contexts, progress, f"starting {args.workflow}"),
                version=args.version or "",
                correlation_id=args.correlation_id or "",
                request_id=args.request_id or "",
                **_start_options(args),
            )
    finally:
        progress.clear()
    if args.json:
        print_json(ids)
    else:
        print("\n".join(ids))
    return 0


def _wait_timeout(args: argparse.Namespace) -> None:
    """``--timeout`` is how long ``--wait`` waits: without it, refused (it was taken and ignored);
    with it, 60 s unless given."""
    if args.timeout is not None and not args.wait:
        raise InvalidArgument(
            f"--timeout {args.timeout:g} goes with --wait (it is how long --wait waits): add --wait, "
            "or drop --timeout"
        )
    if args.timeout is None:
        args.timeout = DEFAULT_WAIT_SECONDS


#: How long ``--wait`` waits without ``--timeout``, in seconds.
DEFAULT_WAIT_SECONDS = 60.0


def cmd_start(args: argparse.Namespace) -> int:
    _wait_timeout(args)
    if args.from_file is not None:
        return cmd_start_many(args)
    with client_from_args(args) as client:
        info = client.start(
            args.workflow,
            json_arg(args.context, "--context") or {},
            version=args.version or "",
            correlation_id=args.correlation_id or "",
            request_id=args.request_id or "",
            dedup_key=args.dedup_key or "",
            dedup_window=duration_arg(args.dedup_window, "--dedup-window"),
            **_start_options(args),
        )
        if info.deduplicated and not args.json:
            print(
                f"wiggle: deduplicated: {info.instance_id} holds dedup key {info.dedup_key!r}",
                file=sys.stderr,
            )
        if args.wait:
            info = wait_with_progress(client, info, args)
        print_json(info) if args.json else print_instance(info)
    return waited(info, args)


def cmd_get(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        info = client.get(args.instance_id)
        history = client.history(args.instance_id) if args.history else None
        if args.json:
            print_json({"instance": info, "history": history} if history is not None else info)
        else:
            print_instance(info, history)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from .views import print_history

    with client_from_args(args) as client:
        history = client.history(args.instance_id)
        if args.json:
            print_json(history)
        else:
            print_history(history, sys.stdout, tracebacks=not args.no_tracebacks, indent="")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        info, changed = client.cancel(args.instance_id, args.reason)
    if args.json:
        print_json({"instance": info, "changed": changed})
    elif changed:
        print(f"{info.instance_id}: cancelled")
    if not changed:  # refused by the state (README, "The command line"): said where errors go
        print(f"wiggle: {info.instance_id} already {info.status}; nothing changed", file=sys.stderr)
        return 4
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    # The table shows no context, so it asks for none (the server then does not read them);
    # --json prints them unless --no-context.
    with_context = bool(args.json) and not args.no_context
    with client_from_args(args) as client:
        items, next_token = client.list(
            workflow=args.workflow or "",
            status=(args.status or "").upper(),
            correlation_id=args.correlation_id or "",
            created_after=args.created_after or 0,
            created_before=args.created_before or 0,
            page_size=args.page_size,
            page_token=args.page_token or "",
            node=args.node or "",
            text=args.text or "",
            context=dict(args.ctx or []),
            top_level=args.top_level,
            parent_id=args.parent or "",
            schedule_id=args.schedule or "",
            with_context=with_context,
        )
        if args.json:
            rows: list[Any] = msgspec.to_builtins(items)
            if not with_context:  # no "context": {} that a script could take for the instance's
                for row in rows:
                    del row["context"]
            print_json({"instances": rows, "next_page_token": next_token})
            return 0
        print(f"{'INSTANCE':<28}  {'WORKFLOW':<20} {'STATUS':<10} {'CREATED':<24}  CORRELATION")
        for i in items:
            print(
                f"{i.instance_id:<28}  {i.workflow:<20} {i.status:<10} {when(i.created_at):<24}  {i.correlation_id}"
            )
        if next_token:
            print(f"more: --page-token {next_token}")
    return 0


def cmd_complete_task(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        info = client.complete_user_task(args.instance_id, args.name, json_arg(args.data, "--data") or {})
        print_json(info) if args.json else print_instance(info)
    return 0


def cmd_signal(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        data = json_arg(args.data, "--data") or {}
        result = client.signal(args.instance_id, args.name, data, args.signal_id, sender=args.sender or "")
        if args.json:
            print_json(result)
        else:
            print(f"{args.instance_id}: signal {args.name!r} {result.outcome.lower()}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    _wait_timeout(args)
    with client_from_args(args) as client:
        context = json_arg(args.context, "--context")
        info = client.retry(
            args.instance_id, from_node=args.from_node or "", context=context, requested_by=args.by
        )
        if args.wait:
            info = wait_with_progress(client, info, args)
        print_json(info) if args.json else print_instance(info)
    return waited(info, args)


#: The most instances a page holds: the server's limit (wiggle/_server/service_limits.py).
MAX_PAGE_SIZE = 1000


def page_size_arg(text: str) -> int:
    """An argparse ``type``: ``--page-size``, 1 to MAX_PAGE_SIZE. 0 was taken and meant the
    server's default page (the API's unset page_size), while every other value outside the range
    was refused: refused too, before any call."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {MAX_PAGE_SIZE} instances per page (default 50), got {value}"
        )
    return value


def _verb(sub: Any, name: str, help: str, description: str, examples: list[str]) -> Any:
    """A verb's parser: its one-line help, a description and an examples epilog."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help, description=description, epilog=epilog)


STATUSES = [s.value for s in InstanceStatus]


def add_parsers(sub: Any) -> None:
    """Add the instance verbs (start, get, history, cancel, list, complete-task, signal, retry)."""
    _add_start(sub)
    _add_get(sub)
    _add_history(sub)
    _add_cancel(sub)
    _add_list(sub)
    _add_complete_task(sub)
    _add_signal(sub)
    _add_retry(sub)


def _add_start(sub: Any) -> None:
    p = _verb(
        sub,
        "start",
        "start an instance (or one per line of a file)",
        "Start an instance of WORKFLOW (its latest version unless --version) with the JSON object "
        "of --context, and print it. --wait waits until it finishes, showing its progress on a "
        "terminal. --from-file starts one instance per line of a JSON-lines file in bulk and prints "
        "the ids in order (a count on a terminal).",
        [
            'wiggle start orders --context \'{"order_id": "A-1", "quantity": 2}\'',
            "wiggle start orders --context @order.json --wait --timeout 300",
            "wiggle start orders --request-id nightly-2026-12-01 --from-file orders.jsonl",
        ],
    )
    p.add_argument("workflow", help="the workflow's name")
    p.add_argument("--context", help="JSON object (or @file holding one); default {}")
    p.add_argument("--version", dest="version", help="a registered version (default: the latest)")
    p.add_argument("--correlation-id", help="your own id for the instance (searchable with list)")
    p.add_argument(
        "--request-id",
        help="idempotency key: a start repeating it returns the instance the first one started",
    )
    p.add_argument(
        "--from-file",
        metavar="FILE.jsonl",
        help="start one instance per line (a JSON object each; - reads stdin) in bulk; prints the ids in order",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait until it finishes: exit 1 if it FAILED or was CANCELLED, 6 if still running at --timeout",
    )
    p.add_argument("--timeout", type=seconds_arg, default=None, help="seconds --wait waits (default 60)")
    # flow control (docs/flow-control.md)
    p.add_argument(
        "--priority",
        type=int,
        default=0,
        help="-100..100 (default 0): higher is claimed first; a level is worth a minute of waiting",
    )
    p.add_argument(
        "--start-at", metavar="TIME", help="start then (ISO-8601 with a zone, e.g. 2030-01-31T18:00:00Z)"
    )
    p.add_argument(
        "--start-delay", metavar="DURATION", help="start after this long (seconds, or 90s, 15m, 2h, 1d)"
    )
    p.add_argument(
        "--dedup-key",
        help="while an instance of the workflow holding this key is live (or within its window), return it instead",
    )
    p.add_argument(
        "--dedup-window",
        metavar="DURATION",
        help="how long the key stays held after the instance finishes (default: until it finishes)",
    )
    # (--timeout is how long --wait waits, as it always was)
    p.add_argument(
        "--workflow-timeout",
        metavar="DURATION",
        help="the instance's time limit, instead of the workflow's (0: none; seconds, or 30s, 15m, 2h)",
    )
    p.set_defaults(func=cmd_start)


def _add_get(sub: Any) -> None:
    p = _verb(
        sub,
        "get",
        "show an instance",
        "Show an instance: status, context, tokens (where each branch is, who holds it) and "
        "buffered signals; --history adds every step attempt.",
        ["wiggle get wi-01jd5x...", "wiggle get wi-01jd5x... --history", "wiggle get wi-01jd5x... --json"],
    )
    p.add_argument("instance_id", help="the instance's id (wi-...)")
    p.add_argument("--history", action="store_true", help="with every step attempt")
    p.set_defaults(func=cmd_get)


def _add_history(sub: Any) -> None:
    p = _verb(
        sub,
        "history",
        "an instance's step attempts, with each failure's traceback",
        "An instance's history, oldest first: one line per step attempt, server-side node and "
        "operator action, with the traceback of each failed attempt.",
        ["wiggle history wi-01jd5x...", "wiggle history wi-01jd5x... --no-tracebacks"],
    )
    p.add_argument("instance_id", help="the instance's id (wi-...)")
    p.add_argument("--no-tracebacks", action="store_true", help="the error lines only")
    p.set_defaults(func=cmd_history)


def _add_cancel(sub: Any) -> None:
    p = _verb(
        sub,
        "cancel",
        "cancel an instance",
        "Cancel a running instance (and its sub-workflow children). An instance that already "
        "finished is left as it is: exit 4.",
        ["wiggle cancel wi-01jd5x...", "wiggle cancel wi-01jd5x... --reason 'customer withdrew'"],
    )
    p.add_argument("instance_id", help="the instance's id (wi-...)")
    p.add_argument("--reason", default="cancelled by operator", help="recorded on the instance")
    p.set_defaults(func=cmd_cancel)


def _context_filter(raw: str) -> tuple[str, str]:
    """``FIELD=VALUE`` of ``--ctx``; argparse reports a bad one as a usage error."""
    field, eq, value = raw.partition("=")
    if not eq or not field.strip():
        raise argparse.ArgumentTypeError(f"--ctx takes FIELD=VALUE, got {raw!r}")
    return field.strip(), value.strip()


def _add_list(sub: Any) -> None:
    p = _verb(
        sub,
        "list",
        "list instances, newest first",
        "List instances, newest first, one page at a time; filter by workflow, status or correlation "
        "id, search by node, status reason or error text and context field.",
        [
            "wiggle list --workflow orders --status failed",
            "wiggle list --correlation-id A-1 --json",
            "wiggle list --page-size 200 --page-token <the token the last page printed>",
            "wiggle list --ctx customer_id=c-42 --top-level",
            "wiggle list --workflow orders --node approve --text 'card declined'",
            "wiggle list --parent wi-01jd5x... --status running",
            "wiggle list --schedule nightly --created-after 1d",
        ],
    )
    p.add_argument("--workflow", help="only this workflow's instances")
    p.add_argument(
        "--status", type=str.upper, choices=STATUSES, help="only instances in this status (any case)"
    )
    p.add_argument("--correlation-id", help="only instances with this correlation id")
    p.add_argument("--node", help="only instances with a token at this node now")
    p.add_argument("--text", help="only instances whose status reason or error contains this (any case)")
    p.add_argument(
        "--ctx",
        action="append",
        type=_context_filter,
        metavar="FIELD=VALUE",
        help="only instances whose top-level context FIELD's value, as text, is VALUE (repeatable)",
    )
    p.add_argument("--top-level", action="store_true", help="leave out sub-workflow children")
    p.add_argument("--parent", metavar="INSTANCE_ID", help="only this instance's sub-workflow children")
    p.add_argument("--schedule", metavar="SCHEDULE_ID", help="only the instances this schedule started")
    p.add_argument(
        "--created-after",
        type=_time_filter("--created-after"),
        metavar="WHEN",
        help="only instances created at or after WHEN: a date and time (UTC unless an offset is "
        "given), a time ago (15m, 2h, 3d: by this machine's clock) or ms since the epoch",
    )
    p.add_argument(
        "--created-before",
        type=_time_filter("--created-before"),
        metavar="WHEN",
        help="only instances created before WHEN (as --created-after)",
    )
    p.add_argument(
        "--page-size",
        type=page_size_arg,
        default=50,
        help=f"instances per page, 1 to {MAX_PAGE_SIZE} (default 50)",
    )
    p.add_argument("--page-token", help="the next page (printed after a full page)")
    p.add_argument(
        "--no-context",
        action="store_true",
        help="with --json, leave each instance's context out (cheap over large contexts; the table never has them)",
    )
    p.set_defaults(func=cmd_list)


def _time_filter(option: str) -> Any:
    """An argparse type for a time filter (the dashboard's forms: wiggle/_server/web/times.py),
    a bad value reported as a usage error naming what is accepted."""
    from .._clock import WALL_CLOCK
    from .._server.web.times import time_arg  # light: re, datetime and the errors only

    def parse(raw: str) -> int:
        try:  # "2h ago" counts back from this machine's clock (the CLI has no server clock)
            return time_arg(raw, option, WALL_CLOCK.now())
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _add_complete_task(sub: Any) -> None:
    p = _verb(
        sub,
        "complete-task",
        "complete a user task",
        "Complete the user task NAME an instance waits at: --data is merged into its context and "
        "the instance moves on.",
        ["wiggle complete-task wi-01jd5x... approve --data '{\"approved\": true}'"],
    )
    p.add_argument("instance_id", help="the instance's id (wi-...)")
    p.add_argument("name", help="the user task's node name")
    p.add_argument("--data", help="JSON object merged into the context (or @file)")
    p.set_defaults(func=cmd_complete_task)


def _add_signal(sub: Any) -> None:
    p = _verb(
        sub,
        "signal",
        "send a named signal to an instance (buffered if not yet awaited)",
        "Send the signal NAME to an instance: a wait_signal node waiting for it takes it at once; "
        "otherwise it is buffered until one does. --id makes a resend a no-op.",
        [
            "wiggle signal wi-01jd5x... payment-received --data '{\"amount_cents\": 1250}'",
            "wiggle signal wi-01jd5x... payment-received --id pay-778 --sender billing",
        ],
    )
    p.add_argument("instance_id", help="the instance's id (wi-...)")
    p.add_argument("name", help="the signal name a wait_signal node listens for")
    p.add_argument("--data", help="JSON object: the signal's data (or @file)")
    p.add_argument("--id", dest="signal_id", help="a signal id: a second send with the same id is a no-op")
    p.add_argument("--sender", help="who sends it (recorded in the history)")
    p.set_defaults(func=cmd_signal)


def _add_retry(sub: Any) -> None:
    p = _verb(
        sub,
        "retry",
        "resume a FAILED instance from the steps that failed (or --from NODE)",
        "Resume a FAILED instance from the steps that failed, or from --from NODE on its main "
        "line, optionally with a corrected context; recorded in its history with who asked.",
        [
            "wiggle retry wi-01jd5x...",
            "wiggle retry wi-01jd5x... --from charge --context @fixed.json --wait",
        ],
    )
    p.add_argument("instance_id", help="the instance's id (wi-...)")
    p.add_argument("--from", dest="from_node", help="restart from this node (on the main line)")
    p.add_argument("--context", help="JSON object replacing the context (or @file)")
    p.add_argument("--by", help="who asks (recorded in the history; default user@host)")
    p.add_argument(
        "--wait", action="store_true", help="wait until it finishes (exit codes as for start --wait)"
    )
    p.add_argument("--timeout", type=seconds_arg, default=None, help="seconds --wait waits (default 60)")
    p.set_defaults(func=cmd_retry)
