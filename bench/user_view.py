"""Issue #28's benchmark in the user's view: Wiggle against a hand-written psycopg loop, alternating.

    python bench/user_view.py --rounds 5 --database-url postgresql://postgres@127.0.0.1:5432/test

Each round runs, one after another on the same PostgreSQL: ``wiggle bench --submit during`` (8
submitting threads sharing one ``Client``, calling ``Client.start`` with dict contexts while 4
worker processes x 16 run 20-step instances; the clock from the first start to the last
completion) in SERVER, LOCAL_SYNC and LOCAL_ASYNC, and the hand-written loop (bench/handwritten.py)
committing per step and per instance, with the same workload, threads and processes. The order
rotates from round to round, so no run always follows the same other. Every run verifies every
instance's final context; a failed run is reported and left out of the medians.

It prints every run (inst/s, CPU ms per instance, the cores its processes kept busy, the other
processes' CPU and the load average seen), then the medians and the ratios issue #28 states its
targets in:

- SERVER / hand-written per step, LOCAL_SYNC / hand-written per step (both commit every step)
- LOCAL_ASYNC / hand-written per instance (both commit once per run)
- start latency p50 / p99 of ``Client.start`` per Wiggle mode while the workers run

With ``--front`` Wiggle runs on two servers on the one database, the submitting client's calls on
the first and the workers on the second (``wiggle bench --servers 2 --front``): a start then
waits behind no report (docs/deployment.md, "Starts apart from steps"). The loops are unchanged.

Beside each inst/s ratio it prints the ratio the two runs' CPU per instance alone would give
(the loop's CPU per instance over Wiggle's): where both runs keep every core of the machine busy
("cores" near the CPU count), their throughputs can differ by no more than that, whatever the
latency of their steps; the inst/s ratio can then reach its target only by using less CPU per
instance.

Before the first round and after the last it times a commit alone (``commit_probe``: a one-row
UPDATE committed by itself, 200 times in a row on an idle database, p50): the per-step loop pays
one about 22 times an instance and is the run most sensitive to it, so a machine whose disk
flushes faster moves the yardstick (bench/README.md, "Round twenty-four").

Absolute figures on a shared machine move by 2x from day to day; the ratios of one sitting are
what to compare (bench/README.md). ``--json`` prints the whole document on stdout instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("SERVER", "LOCAL_SYNC", "LOCAL_ASYNC")
LOOPS = ("step", "instance")
#: (Wiggle mode, the loop it is set against, issue #28's target for the ratio of their inst/s)
RATIOS = (
    ("SERVER", "step", 0.8),
    ("LOCAL_SYNC", "step", 1.0),
    ("LOCAL_ASYNC", "instance", 2.0),
)
KINDS = (*MODES, *LOOPS)


def label(kind: str) -> str:
    return f"wiggle {kind}" if kind in MODES else f"hand-written, commit per {kind}"


def _sizes(args: argparse.Namespace) -> list[str]:
    return [
        "--steps", str(args.steps), "--instances", str(args.instances), "--workers", str(args.workers),
        "--concurrency", str(args.concurrency), "--submit-threads", str(args.submit_threads),
        "--database-url", args.database_url, "--timeout", str(args.timeout),
    ]  # fmt: skip


def wiggle_command(mode: str, args: argparse.Namespace) -> list[str]:
    """The ``wiggle bench`` command of one Wiggle run."""
    cmd = [sys.executable, "-m", "wiggle.cli", "bench", "--modes", mode, "--submit", "during", *_sizes(args)]
    if args.front:
        cmd += ["--servers", "2", "--front"]
    return [*cmd, "--json", "--no-progress"]


def _wiggle(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    out = subprocess.run(wiggle_command(mode, args), capture_output=True, text=True, check=False)
    if not out.stdout.strip().startswith("{"):
        return {"ok": False, "problems": [out.stderr.strip()[-800:] or f"exit {out.returncode}"]}
    doc = json.loads(out.stdout)
    result = doc["modes"][0]
    if not result.get("ok"):
        return {"ok": False, "problems": result.get("problems", [f"exit {out.returncode}"])}
    starts = result["starts"]["latency_ms"]
    env = doc["environment"]
    return {
        "ok": True,
        "instances_per_s": result["instances_per_s"],
        "elapsed_s": result["elapsed_s"],
        "cpu_ms_per_instance": result["cpu_ms_per_instance"],
        "other_cpu_s": result["cpu_s"].get("other"),
        "pg_xact_per_instance": result.get("pg_xact_per_instance"),
        "start_ms": {"p50": starts["p50"], "p99": starts["p99"]},
        "probe_ms": env.get("probe_ms_before"),
    }


def _loop(per: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "handwritten.py"), "--per", per, *_sizes(args), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not out.stdout.strip().startswith("{"):
        return {"ok": False, "problems": [out.stderr.strip()[-800:] or f"exit {out.returncode}"]}
    result = json.loads(out.stdout)
    if not result.get("ok"):
        return {"ok": False, "problems": result.get("problems", [f"exit {out.returncode}"])}
    return {
        "ok": True,
        "instances_per_s": result["instances_per_s"],
        "elapsed_s": result["elapsed_s"],
        "cpu_ms_per_instance": result["cpu_ms_per_instance"],
        "other_cpu_s": result["cpu_s"].get("other"),
        "pg_xact_per_instance": result.get("pg_xact_per_instance"),
        "start_ms": result["start_ms"],
        "probe_ms": result.get("probe_ms_before"),
        "synchronous_commit": result.get("synchronous_commit"),
    }


def commit_probe(url: str, count: int = 200) -> float:
    """The p50 in ms of ``count`` one-row UPDATEs, each committed alone (autocommit), in a table
    of its own in the database's default schema (created and dropped here)."""
    import psycopg
    from psycopg import sql

    table = sql.Identifier(f"wiggle_commit_probe_{os.getpid()}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v int)").format(table))
        try:
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0)").format(table))
            update = sql.SQL("UPDATE {} SET v = v + 1 WHERE id = 1").format(table)
            took = []
            for _ in range(count):
                began = time.perf_counter()
                conn.execute(update)
                took.append((time.perf_counter() - began) * 1000)
        finally:
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
    return round(statistics.median(took), 3)


def run_one(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``kind`` (a Wiggle mode or a loop), with the load average seen before it."""
    load = os.getloadavg()[0]
    result = _wiggle(kind, args) if kind in MODES else _loop(kind, args)
    result["load_before"] = round(load, 2)
    result["load_after"] = round(os.getloadavg()[0], 2)
    return result


def order(n: int) -> list[str]:
    """Round ``n``'s order (from 1): the five kinds, rotated by one more each round."""
    shift = (n - 1) % len(KINDS)
    return [*KINDS[shift:], *KINDS[:shift]]


def median(runs: list[dict[str, Any]], *path: str) -> float | None:
    """The median of the value at ``path`` over the runs that verified (None if none did)."""
    values = []
    for r in runs:
        v: Any = r
        for key in path:
            v = v.get(key) if isinstance(v, dict) else None
        if r.get("ok") and v is not None:
            values.append(float(v))
    return round(statistics.median(values), 2) if values else None


def cores(run: dict[str, Any]) -> float | None:
    """The cores a run's processes kept busy on average over its window (all roles' CPU per
    instance times instances per second)."""
    if not run.get("ok") or run.get("cpu_ms_per_instance") is None:
        return None
    return round(float(run["cpu_ms_per_instance"]) * float(run["instances_per_s"]) / 1000.0, 2)


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per kind, the ratios of RATIOS (of inst/s, and of CPU per instance inverted), the
    Wiggle modes' start latencies."""
    medians = {k: median(v, "instances_per_s") for k, v in runs.items()}
    cpu = {k: median(v, "cpu_ms_per_instance") for k, v in runs.items()}
    busy = {k: median([{**r, "cores": cores(r)} for r in v], "cores") for k, v in runs.items()}
    pairs = [(mode, per) for mode, per, _ in RATIOS if mode in medians and per in medians]
    ratios = {
        f"{mode}/{per}": (round(medians[mode] / medians[per], 2) if medians[mode] and medians[per] else None)
        for mode, per in pairs
    }
    cpu_ratios = {
        f"{mode}/{per}": (round(cpu[per] / cpu[mode], 2) if cpu[mode] and cpu[per] else None)
        for mode, per in pairs
    }
    starts = {m: {q: median(runs[m], "start_ms", q) for q in ("p50", "p99")} for m in MODES if m in runs}
    return {
        "medians": medians,
        "cpu_ms_per_instance": cpu,
        "cores": busy,
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
        "start_ms": starts,
    }


def render(doc: dict[str, Any]) -> str:
    """The table: every run, then medians and ratios."""
    s = doc["settings"]
    lines = [
        f"user view (issue #28): {s['steps']} steps x {s['instances']} instances, {s['workers']} worker processes x "
        f"{s['concurrency']}, {s['submit_threads']} submitting threads, {s['rounds']} alternating round(s)",
        *(
            ["Wiggle on 2 servers: the submitting client on the first, the workers on the second (--front)"]
            if s.get("front")
            else []
        ),
        "",
        f"{'round':>5}  {'run':<34} {'inst/s':>8} {'CPU ms/inst':>11} {'cores':>5} {'pg xact/inst':>12} "
        f"{'other CPU s':>11} {'load':>10} {'probe ms':>8}",
    ]
    for n, kind, r in doc["sequence"]:
        if not r["ok"]:
            lines.append(f"{n:>5}  {label(kind):<34} FAILED: {'; '.join(r['problems'])[:300]}")
            continue
        lines.append(
            f"{n:>5}  {label(kind):<34} {r['instances_per_s']:>8.1f} {r['cpu_ms_per_instance']:>11.2f} "
            f"{_fmt(cores(r)):>5} {_fmt(r.get('pg_xact_per_instance')):>12} {_fmt(r.get('other_cpu_s')):>11} "
            f"{r['load_before']:>4.1f}-{r['load_after']:<5.1f} {_fmt(r.get('probe_ms'), '.1f'):>8}"
        )
    sm = doc["summary"]
    lines += [
        "",
        f"medians of {s['rounds']} round(s) (machine: {os.cpu_count()} CPUs):",
        f"  {'run':<34} {'inst/s':>8} {'CPU ms/inst':>11} {'cores':>5}",
    ]
    for kind in KINDS:
        lines.append(
            f"  {label(kind):<34} {_fmt(sm['medians'].get(kind), '.1f'):>8} "
            f"{_fmt(sm['cpu_ms_per_instance'].get(kind)):>11} {_fmt(sm['cores'].get(kind)):>5}"
        )
    lines.append("")
    for mode, per, target in RATIOS:
        key = f"{mode}/{per}"
        lines.append(
            f"  {mode} / hand-written per {per}: {_fmt(sm['ratios'].get(key))} (target >= {target}); "
            f"CPU per instance alone would give {_fmt(sm['cpu_ratios'].get(key))}"
        )
    for mode in MODES:
        st = sm["start_ms"].get(mode, {})
        lines.append(
            f"  {mode} Client.start latency p50 {_fmt(st.get('p50'))} ms, p99 {_fmt(st.get('p99'))} ms"
        )
    sync = {r.get("synchronous_commit") for _, k, r in doc["sequence"] if k in LOOPS and r["ok"]}
    if sync:
        lines.append(
            f"  synchronous_commit (the database's, both sides): {', '.join(sorted(map(str, sync)))}"
        )
    probes = doc.get("commit_probe_ms")
    if probes:
        lines.append(
            f"  commit probe (a one-row UPDATE committed alone, p50 of 200): {probes[0]:.3f} ms before, "
            f"{probes[-1]:.3f} ms after"
        )
    return "\n".join(lines)


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--submit-threads", type=int, default=8)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test",
    )
    p.add_argument(
        "--front",
        action="store_true",
        help="Wiggle on two servers (one database): the submitting client on the first, the workers on "
        "the second (wiggle bench --servers 2 --front; docs/deployment.md#starts-apart-from-steps)",
    )
    p.add_argument("--json", action="store_true", help="the whole document on stdout (the table on stderr)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if min(args.rounds, args.steps, args.instances, args.workers, args.concurrency, args.submit_threads) < 1:
        print("user_view: --rounds and the sizes must be >= 1", file=sys.stderr)
        return 2
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    sequence: list[tuple[int, str, dict[str, Any]]] = []
    probes = [commit_probe(args.database_url)]
    for n in range(1, args.rounds + 1):
        for kind in order(n):
            result = run_one(kind, args)
            runs[kind].append(result)
            sequence.append((n, kind, result))
            shown = f"{result['instances_per_s']} inst/s" if result["ok"] else f"FAILED {result['problems']}"
            print(f"round {n} {label(kind)}: {shown}", file=sys.stderr, flush=True)
    probes.append(commit_probe(args.database_url))
    doc = {
        "settings": vars(args),
        "runs": runs,
        "sequence": sequence,
        "summary": summary(runs),
        "commit_probe_ms": probes,
    }
    if args.json:
        print(render(doc), file=sys.stderr)
        print(json.dumps(doc, indent=2))
    else:
        print(render(doc))
    failed = sorted({kind for _, kind, r in sequence if not r["ok"]})
    if failed:
        print(f"runs that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
