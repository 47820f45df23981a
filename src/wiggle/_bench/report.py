"""The benchmark's report: the tables people read and the JSON document scripts read.

``render`` turns the run's document (settings, environment, one result per mode) into text;
``emit`` prints it, with the JSON document on stdout under --json (the tables then go to stderr).
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["emit", "render"]


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec)


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    env = doc["environment"]
    lines = [
        f"wiggle e2e benchmark: {s['steps']} steps x {s['instances']} instances, {s['workers']} workers x "
        f"{s['concurrency']} concurrency, transport {s['transport']}, {s['handler']} handlers, batch {s['batch_size']}",
        f"store: {env['store']}; hot paths: server {env.get('server_impl')}, workers {env.get('worker_impl')}; "
        f"python {env['python']} on {env['cpus']} CPU(s)",
    ]
    if env.get("postgres_note"):
        lines.append(f"note: {env['postgres_note']}")
    ok = [m for m in doc["modes"] if m.get("ok")]
    bad = [m for m in doc["modes"] if not m.get("ok")]
    pg = any(m.get("pg_xact_commit") is not None for m in ok)
    if ok:
        head = f"{'mode':<12} {'inst/s':>8} {'steps/s':>9} {'drain s':>8} {'p50 ms':>8} {'p99 ms':>8} {'RPC/inst':>9} {'tx/inst':>8}"
        if pg:
            head += f" {'pg xact/inst':>12}"
        head += f" {'CPU s: server':>13} {'workers':>8}"
        if pg:
            head += f" {'pg back':>8} {'pg bg':>6}"
        head += f" {'driver':>7} {'irq':>5} {'other':>6} {'CPU ms/inst':>11}"
        lines += ["", head, "-" * len(head)]
        for m in ok:
            row = (
                f"{m['mode']:<12} {m['instances_per_s']:>8.1f} {m['steps_per_s']:>9.1f} {m['elapsed_s']:>8.2f} "
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
        methods = sorted({k for m in ok for k in m["rpc_per_instance"]})
        head = f"{'RPCs per instance':<24}" + "".join(f" {m['mode']:>12}" for m in ok)
        lines += ["", head, "-" * len(head)]
        for method in methods:
            label = method + (" (driver)" if method == "ListInstances" else "")
            lines.append(
                f"{label:<24}" + "".join(f" {m['rpc_per_instance'].get(method, 0):>12.3f}" for m in ok)
            )
        lines.append(
            f"{'handler runs/inst':<24}"
            + "".join(f" {m['handler_executions'] / m['instances']:>12.2f}" for m in ok)
        )
        if any(m["rpc_errors"] for m in ok):
            lines.append(
                "RPC errors: " + "; ".join(f"{m['mode']}: {m['rpc_errors']}" for m in ok if m["rpc_errors"])
            )
        lines.append(
            "latency = created_at -> finished_at of pre-submitted instances (includes the wait in the queue); "
            "RPC/inst excludes the driver's ListInstances polls; CPU ms/inst = server + workers + postgres + driver; "
            "irq = the kernel's interrupt time, other = every other process on the machine, both during the drain"
        )
    busy = [
        f"{m['mode']} {m['cpu_s']['other']:.1f} s"
        for m in ok
        if (m["cpu_s"].get("other") or 0) > 0.05 * m["elapsed_s"]
    ]
    if busy:
        lines.append(
            "warning: other processes used CPU during the drain ("
            + ", ".join(busy)
            + "): the figures are disturbed"
        )
    for m in bad:
        lines += ["", f"{m['mode']}: FAILED - no figures"]
        lines += [f"  - {p}" for p in m.get("problems", [])]
    lines.append("")
    if bad:
        lines.append(
            f"RESULT: WRONG - {len(bad)} of {len(doc['modes'])} mode(s) failed verification or did not finish"
        )
    else:
        lines.append(
            f"RESULT: OK - verified all {s['instances']} instances COMPLETED with the expected context in every mode "
            f"({', '.join(m['mode'] for m in ok)})"
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
