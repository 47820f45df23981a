"""The ``wiggle`` verbs on instances: start (one or many), get, history, cancel, list, complete-task,
signal, retry."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .._status import InstanceStatus
from ..errors import InvalidArgument
from .common import client_from_args, json_arg, print_instance, print_json
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
    if info.status == InstanceStatus.RUNNING:
        print(f"wiggle: {info.instance_id} still RUNNING after --timeout {args.timeout:g} s", file=sys.stderr)
        return STILL_RUNNING
    return 0


def cmd_start_many(args: argparse.Namespace) -> int:
    if args.context is not None or args.wait:
        raise InvalidArgument("--from-file takes the contexts from the file: drop --context and --wait")
    contexts = _read_jsonl(args.from_file)
    if not contexts:
        raise InvalidArgument(f"--from-file {args.from_file} holds no contexts (one JSON object per line)")
    with client_from_args(args) as client:
        ids = client.start_many(
            args.workflow,
            contexts,
            version=args.version or "",
            correlation_id=args.correlation_id or "",
            request_id=args.request_id or "",
        )
    if args.json:
        print_json(ids)
    else:
        print("\n".join(ids))
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    if args.from_file is not None:
        return cmd_start_many(args)
    with client_from_args(args) as client:
        info = client.start(
            args.workflow,
            json_arg(args.context, "--context") or {},
            version=args.version or "",
            correlation_id=args.correlation_id or "",
            request_id=args.request_id or "",
        )
        if args.wait:
            info = client.wait(info.instance_id, timeout=args.timeout)
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
        else:
            print(
                f"{info.instance_id}: {'cancelled' if changed else f'already {info.status}; nothing changed'}"
            )
    return 0 if changed else 4  # refused by the state (README, "The command line")


def cmd_list(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        items, next_token = client.list(
            workflow=args.workflow or "",
            status=(args.status or "").upper(),
            correlation_id=args.correlation_id or "",
            page_size=args.page_size,
            page_token=args.page_token or "",
        )
        if args.json:
            print_json({"instances": items, "next_page_token": next_token})
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
    with client_from_args(args) as client:
        context = json_arg(args.context, "--context")
        info = client.retry(
            args.instance_id, from_node=args.from_node or "", context=context, requested_by=args.by
        )
        if args.wait:
            info = client.wait(info.instance_id, timeout=args.timeout)
        print_json(info) if args.json else print_instance(info)
    return waited(info, args)


def add_parsers(sub: Any) -> None:
    """Add the instance verbs (start, get, history, cancel, list, complete-task, signal, retry)."""
    p = sub.add_parser("start", help="start an instance")
    p.add_argument("workflow")
    p.add_argument("--context", help="JSON object (or @file)")
    p.add_argument("--version", dest="version")
    p.add_argument("--correlation-id")
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
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("get", help="show an instance")
    p.add_argument("instance_id")
    p.add_argument("--history", action="store_true", help="with every step attempt")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("history", help="an instance's step attempts, with each failure's traceback")
    p.add_argument("instance_id")
    p.add_argument("--no-tracebacks", action="store_true", help="the error lines only")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("cancel", help="cancel an instance")
    p.add_argument("instance_id")
    p.add_argument("--reason", default="cancelled by operator")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("list", help="list instances, newest first")
    p.add_argument("--workflow")
    p.add_argument("--status")
    p.add_argument("--correlation-id")
    p.add_argument("--page-size", type=int, default=50)
    p.add_argument("--page-token")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("complete-task", help="complete a user task")
    p.add_argument("instance_id")
    p.add_argument("name")
    p.add_argument("--data", help="JSON object merged into the context (or @file)")
    p.set_defaults(func=cmd_complete_task)

    p = sub.add_parser("signal", help="send a named signal to an instance (buffered if not yet awaited)")
    p.add_argument("instance_id")
    p.add_argument("name", help="the signal name a wait_signal node listens for")
    p.add_argument("--data", help="JSON object: the signal's data (or @file)")
    p.add_argument("--id", dest="signal_id", help="a signal id: a second send with the same id is a no-op")
    p.add_argument("--sender", help="who sends it (recorded in the history)")
    p.set_defaults(func=cmd_signal)

    p = sub.add_parser("retry", help="resume a FAILED instance from the steps that failed (or --from NODE)")
    p.add_argument("instance_id")
    p.add_argument("--from", dest="from_node", help="restart from this node (on the main line)")
    p.add_argument("--context", help="JSON object replacing the context (or @file)")
    p.add_argument("--by", help="who asks (recorded in the history; default user@host)")
    p.add_argument(
        "--wait", action="store_true", help="wait until it finishes (exit codes as for start --wait)"
    )
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=cmd_retry)
