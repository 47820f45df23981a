"""What the ``wiggle`` command's verbs share: the client from the flags, JSON arguments, printing."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import timedelta
from typing import Any

import msgspec

from .._clock import WALL_CLOCK
from ..errors import InvalidArgument
from .views import when

__all__ = [
    "QUIET_FLAG",
    "print_json",
    "print_instance",
    "json_arg",
    "client_from_args",
    "seconds_arg",
    "positive_seconds_arg",
]


#: Given to each process of ``wiggle server --processes N`` and ``wiggle worker --processes N``:
#: their parent warned of the unknown WIGGLE_* variables they share (wiggle/_env.py
#: unknown_variables), so they do not again, N times over. Not in --help: it is no setting. Its
#: "--no-" keeps every abbreviation that worked before working: "--no-" was ambiguous already in
#: ``wiggle worker`` (--no-register, --no-use-local-modes), and no server flag starts "--n".
QUIET_FLAG = "--no-variable-warnings"


def seconds_arg(text: str) -> float:
    """An argparse ``type``: a finite number of seconds, 0 or more (``--timeout``). Anything else
    is a usage error, exit 2, before any call is made."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, 0 or more, got {text!r}")
    return value


def positive_seconds_arg(text: str) -> float:
    """``seconds_arg``, more than 0 (a socket's timeout)."""
    value = seconds_arg(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return value


def print_json(value: Any) -> None:
    """Print ``value`` (a result struct, list or dict) as indented JSON (``--json``)."""
    print(json.dumps(msgspec.to_builtins(value), indent=2, sort_keys=True))


def print_instance(info: Any, history: list[Any] | None = None) -> None:
    """Print an instance (and its history) as text."""
    print(f"instance   {info.instance_id}")
    print(f"workflow   {info.workflow} (version {info.version})")
    print(f"status     {info.status}" + (f"  reason: {info.reason}" if info.reason else ""))
    if getattr(info, "waiting_reason", ""):  # docs/flow-control.md#workflow-concurrency
        print(f"waiting    {info.waiting_reason}")
    if info.error:
        print(f"error      {info.error}")
    if info.correlation_id:
        print(f"correlation {info.correlation_id}")
    if info.parent_id:
        print(f"parent     {info.parent_id} (token {info.parent_token_id}, depth {info.depth})")
    print(f"created    {when(info.created_at)}   finished {when(info.finished_at)}")
    print(f"context    {json.dumps(info.context, sort_keys=True)}")
    now = WALL_CLOCK.now()
    for t in info.tokens:
        line = f"  token {t.token_id} at {t.node_id}: {t.status} (attempt {t.attempt})"
        if t.queue and t.status in ("READY", "RUNNING"):
            line += f" on queue {t.queue}"
        if t.available_at > now:  # a backoff's or a release's end, a sleep's end, a deadline
            line += f"; {'deadline' if t.status == 'AWAITING' else 'next'} {when(t.available_at)}"
        if t.lease_owner:
            line += f" leased to {t.lease_owner}"
        if t.local_run_owner:
            line += f"; in a local run by {t.local_run_owner} ({t.local_run_steps} steps reported)"
        if t.last_error:
            line += f"; last error: {t.last_error}"
        if t.child_id:
            line += f"; waits for child {t.child_id}"
        print(line)
    for s in getattr(info, "pending_signals", ()):
        print(
            f"  buffered signal {s.name!r} sent {when(s.sent_at)}"
            + (f" (id {s.signal_id})" if s.signal_id else "")
        )
    if history is not None:
        from .views import print_history

        print("history")
        print_history(history, sys.stdout)


def json_arg(text: str | None, what: str) -> Any:
    """The JSON value of a flag (``@file`` reads a file); InvalidArgument naming ``what``."""
    if text is None:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"{what}: cannot read {text[1:]!r}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc}") from None


def credentials_from_args(args: argparse.Namespace) -> Any:
    """The Credentials of the TLS and token flags (or their WIGGLE_* variables)."""
    from .._security.credentials import Credentials

    return Credentials.from_env(
        ca_file=args.tls_ca,
        cert_file=args.client_cert,
        key_file=args.client_key,
        token_file=args.token_file,
        server_name=args.tls_server_name,
    )


def checked_target(args: argparse.Namespace) -> str:
    """``--target`` (or WIGGLE_TARGET) once it names a server; InvalidArgument naming the option
    otherwise: empty, an entry of a list that is not host:port, a name that does not resolve, a
    list mixing IPv4 and IPv6 (wiggle/_client/targets.py). ``wiggle worker --target ""`` stopped
    with a traceback, and the client verbs said "no server address given" without saying where."""
    from .._client.targets import join_targets

    try:
        join_targets(args.target)
    except ValueError as exc:
        raise InvalidArgument(f"--target (WIGGLE_TARGET): {exc}") from None
    return str(args.target)


def client_from_args(args: argparse.Namespace) -> Any:
    """A sync Client for ``--target`` with the TLS and token flags (or WIGGLE_* variables)."""
    from ..client import Client

    target = checked_target(args)
    try:
        return Client(target, credentials=credentials_from_args(args))
    except ValueError as exc:
        raise SystemExit(f"wiggle: {exc}") from None


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_arg(text: str | None, flag: str) -> timedelta | None:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``250ms`` as a timedelta (None when not given)."""
    if text is None:
        return None
    value = text.strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if value.endswith(u)), "")
    number = value[: len(value) - len(unit)] if unit else value
    try:
        seconds = float(number) * _UNITS[unit or "s"]
    except ValueError:
        raise InvalidArgument(
            f"{flag} {text!r} is not a duration: seconds, or a number with ms, s, m, h or d"
        ) from None
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{flag} {text!r} is not a finite duration")
    if seconds < 0:
        raise InvalidArgument(f"{flag} must not be negative, got {text!r}")
    return timedelta(seconds=seconds)
