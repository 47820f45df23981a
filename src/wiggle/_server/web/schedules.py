"""The dashboard's Schedules page and its JSON API: every schedule with its next fire times and
paused state, and the pause / resume / trigger actions (docs/dashboard.md#schedules).
"""

from __future__ import annotations

import logging
from html import escape
from typing import Any
from urllib.parse import urlencode

import msgspec

from ..._engine.schedules import Schedule
from ...errors import InvalidArgument
from ..instances import Instances
from ..schedules import correlation_of

__all__ = ["schedules_page", "schedule_json", "act", "schedules_html", "ACTIONS"]

log = logging.getLogger("wiggle.http")

ACTIONS = ("pause", "resume", "trigger")


def schedule_json(instances: Instances, schedule: Schedule) -> dict[str, Any]:
    """One schedule as the API shows it: its record, its next fire times, its instances' filter."""
    return {
        **msgspec.to_builtins(schedule),
        "next_fire_times": instances.schedules.upcoming(schedule),
        "correlation_id": correlation_of(schedule.id),
    }


async def schedules_page(instances: Instances, workflow: str = "") -> dict[str, Any]:
    """Every schedule (of ``workflow``), by id, with the server's clock and the actions (the HTTP
    side turns off those the caller's roles may not take: http.py ``_only_allowed``)."""
    found = await instances.schedules.list(workflow)
    return {
        "now": instances.clock.now(),
        "schedules": [schedule_json(instances, s) for s in found],
        "actions": {action: True for action in ACTIONS},
    }


async def act(instances: Instances, schedule_id: str, action: str, actor: str = "") -> dict[str, Any]:
    """Run ``action`` (pause, resume or trigger) on the schedule as ``actor`` (logged once it took
    effect: wiggle/_server/schedules.py); its new state (and the started instance's id)."""
    if action not in ACTIONS:
        raise InvalidArgument(f"schedule action must be one of {', '.join(ACTIONS)}, got {action!r}")
    started = ""
    if action == "pause":
        schedule = await instances.schedules.pause(schedule_id, actor)
    elif action == "resume":
        schedule = await instances.schedules.resume(schedule_id, actor)
    else:
        schedule, started = await instances.schedules.trigger(schedule_id, actor)
    return {"schedule": schedule_json(instances, schedule), "started_instance_id": started}


def _when(ms: int) -> str:
    from .pages import when  # pages imports nothing from here; a late import keeps it one-way

    return when(ms)


def _every(ms: int) -> str:
    """An interval as a person reads it: "every 30 s", "every 5 min", "every 1 h 30 min"."""
    from .pages import duration  # as _when: a late import keeps the imports one-way

    return f"every {duration(ms)}"


def schedules_html(data: dict[str, Any]) -> str:
    """The Schedules page body: one row per schedule with the actions the caller may take."""
    rows = []
    allowed = data.get("actions", dict.fromkeys(ACTIONS, True))  # the API's answer always has it
    for s in data["schedules"]:
        sid = escape(s["id"])
        every = (
            f"cron {escape(s['cron'])} ({escape(s['timezone'])})"
            if s["cron"]
            else f'<span title="{s["interval_millis"]} ms">{_every(s["interval_millis"])}</span>'
        )
        state = (
            '<span class="pill CANCELLED">paused</span>'
            if s["paused"]
            else '<span class="pill RUNNING">active</span>'
        )
        buttons = []
        toggle = "resume" if s["paused"] else "pause"
        for action in (toggle, "trigger"):
            if not allowed.get(action):
                continue
            buttons.append(
                f'<button class="schedule-{action}" data-kind="schedule" data-what="{action} schedule {sid}" '
                f'data-url="/api/schedules/{sid}/{action}">{action}…</button>'
            )
        instances = f"/instances?{urlencode({'schedule_id': s['id']})}"
        last = escape(s["last_instance_id"])
        started = f'<a class="last-instance" href="/instances/{last}">{last}</a>' if last else "-"
        rows.append(
            f'<tr id="{sid}" data-schedule="{sid}" data-paused="{str(s["paused"]).lower()}"><td>{sid}</td>'
            f'<td><a href="/workflows#{escape(s["workflow"])}">{escape(s["workflow"])}</a></td><td>{every}</td>'
            f"<td>{state}</td><td>{'<br>'.join(_when(t) for t in s['next_fire_times']) or '-'}</td>"
            f'<td>{_when(s["last_tick_at"])}</td><td>{started}</td><td class="num">{s["fired"]}</td><td class="num">{s["skipped"]}</td>'
            f'<td><a href="{escape(instances)}">instances</a></td><td>{" ".join(buttons) or "-"}</td></tr>'
        )
    return (
        '<h2>Schedules</h2><div class="wide"><table><thead><tr><th>schedule</th><th>workflow</th><th>when</th>'
        "<th>state</th><th>next fire times</th><th>last tick</th><th>last started</th><th>fired</th>"
        "<th>skipped</th><th></th><th>actions</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
