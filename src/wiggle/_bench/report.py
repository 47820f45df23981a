"""The benchmark's report: the tables people read and the JSON document scripts read.

``render`` turns the run's document (settings, environment, one result per mode) into text;
``emit`` prints it, with the JSON document on stdout under --json (the tables then go to stderr).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .figures import DRIVER_RPCS

__all__ = ["emit", "render", "render_latency"]


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec)


def _label(m: dict[str, Any], by_submit: bool) -> str:
    return f"{m['mode']} {m.get('submit', 'before')}" if by_submit else str(m["mode"])


def _drain_table(ok: list[dict[str, Any]], labels: list[str], pg: bool) -> list[str]:
    w = max(12, *(len(x) for x in labels))
    head = f"{'mode':<{w}} {'inst/s':>8} {'steps/s':>9} {'drain s':>8} {'p50 ms':>8} {'p99 ms':>8} {'RPC/inst':>9} {'tx/inst':>8}"
    if pg:
        head += f" {'pg xact/inst':>12}"
    head += f" {'CPU s: server':>13} {'workers':>8}"
    if pg:
        head += f" {'pg back':>8} {'pg bg':>6}"
    head += f" {'driver':>7} {'irq':>5} {'other':>6} {'CPU ms/inst':>11}"
    lines = ["", head, "-" * len(head)]
    for m, label in zip(ok, labels, strict=True):
        row = (
            f"{label:<{w}} {m['instances_per_s']:>8.1f} {m['steps_per_s']:>9.1f} {m['elapsed_s']:>8.2f} "
            f"{m['latency_ms']['p50']:>8.0f} {m['latency_ms']['p99']:>8.0f} {m['worker_rpcs_per_instance']:>9.2f} "
            f"{m['store_tx_per_instance']:>8.2f}"
        )
        if pg:
            row += f" {_fmt(m['pg_xact_per_instance'], '.2f'):>12}"
        c = m["cpu_s"]
        row += f" {_fmt(c.get('server'), '.2f'):>13} {_fmt(c.get('workers'), '.2f'):>8}"
        if pg:
            row += f" {_fmt(c.get('postgres_backends'), '.2f'):>8} {_fmt(c.get('postgres_background'), '.2f'):>6}"
        row += f" {_fmt(c.get('driver'), '.2f'):>7} {_fmt(c.get('irq'), '.2f'):>5} {_fmt(c.get('other'), '.2f'):>6}"
        row += f" {m['cpu_ms_per_instance']:>11.2f}"
        lines.append(row)
    return lines


def _rpc_table(ok: list[dict[str, Any]], labels: list[str]) -> list[str]:
    w = max(12, *(len(x) for x in labels))
    methods = sorted({k for m in ok for k in m["rpc_per_instance"]})
    head = f"{'RPCs per instance':<24}" + "".join(f" {x:>{w}}" for x in labels)
    lines = ["", head, "-" * len(head)]
    for method in methods:
        label = method + (" (driver)" if method in DRIVER_RPCS else "")
        lines.append(f"{label:<24}" + "".join(f" {m['rpc_per_instance'].get(method, 0):>{w}.3f}" for m in ok))
    lines.append(
        f"{'handler runs/inst':<24}"
        + "".join(f" {m['handler_executions'] / m['instances']:>{w}.2f}" for m in ok)
    )
    lines.append(
        f"{'steps handed off/inst':<24}"
        + "".join(f" {m.get('handed_off_per_instance', 0):>{w}.2f}" for m in ok)
    )
    lines.append(
        f"{'steps chained/inst':<24}" + "".join(f" {m.get('chained_per_instance', 0):>{w}.2f}" for m in ok)
    )
    return lines


#: The contention table's rows: (label, where in a mode's result, key).
_CONTENTION_ROWS = (
    ("claims", "store_per_instance", "claims"),
    ("claims that found none", "store_per_instance", "empty_claims"),
    ("next-ready reads", "store_per_instance", "next_ready_reads"),
    ("NOTIFYs sent", "store_per_instance", "notifies"),
    ("work NOTIFYs heard", "store_per_instance", "work_heard"),
    ("groups on kept copies", "store_per_instance", "kept_groups"),
    ("  their checks that failed", "store_per_instance", "kept_stale"),
    ("pg rows fetched", "pg_per_instance", "tup_fetched"),
    ("pg rows returned", "pg_per_instance", "tup_returned"),
    ("pg rows updated", "pg_per_instance", "tup_updated"),
    ("pg rollbacks", "pg_per_instance", "xact_rollback"),
)


def _contention_table(ok: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """Per instance: the servers' claims and NOTIFYs, the database's row work, and the mean number
    of busy PostgreSQL backends waiting, by wait (sampled): what grows when servers contend."""
    if not any(m.get("store_per_instance") or m.get("pg_per_instance") for m in ok):
        return []
    w = max(12, *(len(x) for x in labels))
    head = f"{'per instance':<32}" + "".join(f" {x:>{w}}" for x in labels)
    lines = ["", head, "-" * len(head)]
    lines.append(f"{'server processes':<32}" + "".join(f" {m.get('servers', 1):>{w}}" for m in ok))
    for label, where, key in _CONTENTION_ROWS:
        values = [(m.get(where) or {}).get(key) for m in ok]
        if any(v is not None for v in values):
            lines.append(f"{label:<32}" + "".join(f" {_fmt(v, '.3f'):>{w}}" for v in values))
    waits = [m.get("pg_waits") for m in ok]
    if any(waits):
        lines.append(
            f"{'pg backends active':<32}"
            + "".join(f" {_fmt((x or {}).get('mean_active'), '.2f'):>{w}}" for x in waits)
        )
        events = sorted({e for x in waits if x for e in x["mean_waiting"]})
        for event in events:
            lines.append(
                f"{'  waiting ' + event:<32}"
                + "".join(
                    f" {_fmt((x or {}).get('mean_waiting', {}).get(event, 0.0), '.2f'):>{w}}" for x in waits
                )
            )
    return lines


def _starts_table(ok: list[dict[str, Any]], labels: list[str]) -> list[str]:
    rows = [(m["starts"], label) for m, label in zip(ok, labels, strict=True) if m.get("starts")]
    if not rows:
        return []
    w = max(12, *(len(x) for _, x in rows))
    by = max(20, *(len(st["clients"]) for st, _ in rows))
    head = f"{'starts':<{w}} {'by':>{by}} {'starts/s':>9} {'span s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    lines = ["", head, "-" * len(head)]
    for st, label in rows:
        lat = st["latency_ms"]
        lines.append(
            f"{label:<{w}} {st['clients']:>{by}} {_fmt(st['per_s'], '.1f'):>9} {st['span_s']:>8.2f} "
            f"{lat['p50']:>8.1f} {lat['p90']:>8.1f} {lat['p99']:>8.1f} {lat['max']:>8.1f}"
        )
    paced = [(st["behind_ms"], label) for st, label in rows if st.get("behind_ms")]
    for late, label in paced:
        lines.append(
            f"{label}: paced starts issued behind their due time by p50 {late['p50']:.1f} ms, at most "
            f"{late['max']:.1f} ms"
            + (" (most were late: the threads could not keep the pace)" if late["p50"] > 1.0 else "")
        )
    return lines


def _store_line(env: dict[str, Any]) -> list[str]:
    lines = [
        f"store: {env['store']}; hot paths: server {env.get('server_impl')}, workers {env.get('worker_impl')}; "
        f"python {env['python']} on {env['cpus']} CPU(s)"
    ]
    if env.get("probe_ms_before") is not None:
        after = env.get("probe_ms_after")
        lines.append(
            f"machine probe: {env['probe_ms_before']:.1f} ms before, "
            + (f"{after:.1f} ms after" if after is not None else "none after")
            + " (a fixed Python loop, wiggle/_bench/probe.py: compare runs only where it agrees)"
        )
    if env.get("postgres_note"):
        lines.append(f"note: {env['postgres_note']}")
    return lines


def _failures(bad: list[dict[str, Any]], labels: list[str]) -> list[str]:
    lines: list[str] = []
    for m, label in zip(bad, labels, strict=True):
        lines += ["", f"{label}: FAILED - no figures"]
        lines += [f"  - {p}" for p in m.get("problems", [])]
    return lines


def render_latency(doc: dict[str, Any]) -> str:
    """The report of a latency run (``--latency N``): one row per mode, failures, the verdict."""
    s = doc["settings"]
    ok = [m for m in doc["modes"] if m.get("ok")]
    bad = [m for m in doc["modes"] if not m.get("ok")]
    lines = [
        f"wiggle latency benchmark: {s['latency']} instances of a {s['steps']}-step linear workflow, one at a time "
        f"(start -> result), {s['workers']} workers x {s['concurrency']} concurrency, transport {s['transport']}, "
        f"{s['handler']} handlers",
        *_store_line(doc["environment"]),
    ]
    if ok:
        limit = ok[0]["gap_limit_ms"]
        head = (
            f"{'mode':<12} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'rpc p50':>8} {'p50/rpc':>8} "
            f"{'gap p50':>8} {'gap p99':>8} "
            f"{'gap max':>8} {f'inst gap>{limit}ms':>16}  worst gap"
        )
        lines += ["", head, "-" * len(head)]
        for m in ok:
            lat, gap, worst = m["latency_ms"], m["gap_ms"], m.get("worst_gap")
            where = f"{worst['after']} -> {worst['before']} of {worst['instance_id']}" if worst else "-"
            lines.append(
                f"{m['mode']:<12} {lat['p50']:>8.1f} {lat['p90']:>8.1f} {lat['p99']:>8.1f} {lat['max']:>8.1f} "
                f"{_fmt(m.get('rpc_p50_ms'), '.2f'):>8} {_fmt(m.get('p50_in_rpcs'), '.1f'):>8} {_fmt(gap['p50']):>8} {_fmt(gap['p99']):>8} {_fmt(gap['max']):>8} "
                f"{m['instances_over_gap_limit']:>16}  {where}"
            )
        lines.append(
            "latency = Client.start called -> Client.wait returned the finished instance, timed by the driver; "
            "gap (ms) = a step's claim (started_at) - the previous step's end (ended_at), from each instance's "
            f"history (server clock); rpc p50 = one GetInstance round trip timed after each instance (the run's "
            f"yardstick: a busy machine slows both), p50/rpc = latency p50 in those round trips; "
            f"{ok[0]['warmup']} warm-up instance(s) per mode not counted"
        )
    lines += _failures(bad, [m["mode"] for m in bad])
    lines.append("")
    if bad:
        lines.append(
            f"RESULT: WRONG - {len(bad)} of {len(doc['modes'])} mode(s) failed verification or did not finish"
        )
    else:
        lines.append(
            f"RESULT: OK - verified all {s['latency']} instances COMPLETED with the expected context in every mode "
            f"({', '.join(m['mode'] for m in ok)})"
        )
    return "\n".join(lines)


def render(doc: dict[str, Any]) -> str:
    """The report of a run document as text: settings, tables, warnings, failures, the verdict."""
    s = doc["settings"]
    if s.get("latency"):
        return render_latency(doc)
    env = doc["environment"]
    servers = f"{s['servers']} server processes, " if s.get("servers", 1) > 1 else ""
    if s.get("front"):
        servers = f"{s['servers']} server processes (the first for the clients alone), "
    lines = [
        f"wiggle e2e benchmark: {s['steps']} steps x {s['instances']} instances, {servers}{s['workers']} workers x "
        f"{s['concurrency']} concurrency, transport {s['transport']}, {s['handler']} handlers, batch {s['batch_size']}",
        *_store_line(env),
    ]
    ok = [m for m in doc["modes"] if m.get("ok")]
    bad = [m for m in doc["modes"] if not m.get("ok")]
    by_submit = any(m.get("submit", "before") != "before" for m in doc["modes"])
    labels = [_label(m, by_submit) for m in ok]
    pg = any(m.get("pg_xact_commit") is not None for m in ok)
    if ok:
        lines += _drain_table(ok, labels, pg)
        lines += _rpc_table(ok, labels)
        lines += _contention_table(ok, labels)
        if any(m["rpc_errors"] for m in ok):
            lines.append(
                "RPC errors: "
                + "; ".join(
                    f"{label}: {m['rpc_errors']}"
                    for m, label in zip(ok, labels, strict=True)
                    if m["rpc_errors"]
                )
            )
        lines.append(
            "latency = created_at -> finished_at of pre-submitted instances (includes the wait in the queue); "
            "RPC/inst excludes the driver's calls (ListInstances polls, starts); CPU ms/inst = server + workers + postgres + driver; "
            "irq = the kernel's interrupt time, other = every other process on the machine, both during the drain"
        )
        if by_submit:
            lines.append(
                "submit during: the window runs from the first start to the last finish, the starts made by "
                "client threads concurrently with the workers (their CPU is the driver's); latency is then each "
                "instance's own created_at -> finished_at"
            )
        lines += _starts_table(ok, labels)
    busy = [
        f"{label} {m['cpu_s']['other']:.1f} s"
        for m, label in zip(ok, labels, strict=True)
        if (m["cpu_s"].get("other") or 0) > 0.05 * m["elapsed_s"]
    ]
    if busy:
        lines.append(
            "warning: other processes used CPU during the drain ("
            + ", ".join(busy)
            + "): the figures are disturbed"
        )
    lines += _failures(bad, [_label(m, by_submit) for m in bad])
    lines.append("")
    if bad:
        lines.append(
            f"RESULT: WRONG - {len(bad)} of {len(doc['modes'])} mode(s) failed verification or did not finish"
        )
    else:
        lines.append(
            f"RESULT: OK - verified all {s['instances']} instances COMPLETED with the expected context in every mode "
            f"({', '.join(labels)})"
        )
    return "\n".join(lines)


def emit(doc: dict[str, Any], as_json: bool) -> None:
    """Print the report: the tables on stdout, or on stderr with the JSON document on stdout."""
    text = render(doc)
    if as_json:
        print(text, file=sys.stderr)
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(text)
