"""Issue #28 item 3: CPU per instance by role with 1, 2 and 4 server processes on one database.

    python bench/scaling.py --rounds 3 --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/scaling.py --servers 1,2,4 --modes SERVER,LOCAL_SYNC --rounds 3 --json

Runs ``wiggle bench --servers N`` (N server processes on one PostgreSQL schema, each on its own
port, worker i on server i mod N; src/wiggle/_bench/deploy.py) for every N and mode, alternating N
within each round, and prints per mode and N the medians of: inst/s, the CPU milliseconds per
instance of each role (servers, PostgreSQL backends and background processes, workers), the
database's transactions and rows fetched per instance, the servers' claims, empty claims and
NOTIFYs per instance, and the mean number of PostgreSQL backends waiting on a lock; then each
role's CPU per instance against N = 1 (issue #28's target: within 10%).

With ``--per-server-rate R`` every run starts its instances while the workers run, paced at
``N x R`` a second in all and spread over the servers as a load balancer would (``wiggle bench
--submit during --submit-rate --submit-to all``), for ``--seconds`` of starts: each server
carries the same load whatever N, as it would where cores grow with N. Without
it (the default) the instances are started first and drained as fast as the machine goes, so at
larger N each server carries a smaller share of the same total load, commits smaller groups, and
its costs per instance grow for that reason alone.

On a 2-core machine more server processes cannot add throughput (everything shares the two
cores); what this measures is whether they add work per instance: lock waits, duplicate or empty
claims, NOTIFYs and the wake-ups they cause. From the per-role costs it projects the throughput of
a deployment with ``--server-cores`` cores for the server processes and a separate PostgreSQL
with ``--pg-cores`` cores (workers elsewhere), and says which side saturates first. The
projection assumes the per-instance costs measured at the largest N hold there and that every
core can be kept busy. It does not model PostgreSQL's commit rate (WAL flushes), nor the one cost
per instance known to grow with N: every NOTIFY is read by each other server's listener backend
in a transaction of its own (docs/architecture.md, "Scaling"), so with 16 server processes
PostgreSQL's share is larger than at the N measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

#: (label, the JSON's cpu_s key(s)) of the roles whose CPU per instance is compared
ROLES = (
    ("server", ("server",)),
    ("postgres", ("postgres_backends", "postgres_background")),
    ("workers", ("workers",)),
)
#: (label, where in a mode's result, key) of the contention counters per instance
COUNTS = (
    ("pg xact", "pg_per_instance", "xact_commit"),
    ("pg rows fetched", "pg_per_instance", "tup_fetched"),
    ("claims", "store_per_instance", "claims"),
    ("empty claims", "store_per_instance", "empty_claims"),
    ("NOTIFYs sent", "store_per_instance", "notifies"),
    ("NOTIFYs heard", "store_per_instance", "work_heard"),
)


def one_run(mode: str, servers: int, args: argparse.Namespace) -> dict[str, Any]:
    """One ``wiggle bench --servers`` run: its figures, or ``ok`` False with ``problems``."""
    instances = args.instances
    paced: list[str] = []
    if args.per_server_rate:
        rate = servers * args.per_server_rate
        instances = max(round(rate * args.seconds), 1)
        paced = ["--submit", "during", "--submit-rate", f"{rate:g}", "--submit-to", "all"]
    cmd = [
        sys.executable, "-m", "wiggle.cli", "bench", "--modes", mode, "--servers", str(servers),
        "--steps", str(args.steps), "--instances", str(instances), "--workers", str(args.workers),
        "--concurrency", str(args.concurrency), "--database-url", args.database_url, "--json", "--no-progress",
        *paced,
    ]  # fmt: skip
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not out.stdout.strip().startswith("{"):
        return {"ok": False, "problems": [out.stderr.strip()[-800:] or f"exit {out.returncode}"]}
    doc = json.loads(out.stdout)
    m = doc["modes"][0]
    if not m.get("ok"):
        return {"ok": False, "problems": m.get("problems", [])}
    n = m["instances"]
    cpu = {label: sum(m["cpu_s"].get(k) or 0.0 for k in keys) * 1000 / n for label, keys in ROLES}
    waits = m.get("pg_waits", {}).get("mean_waiting", {})
    return {
        "ok": True,
        "instances": n,
        "instances_per_s": m["instances_per_s"],
        "cpu_ms": cpu,
        "counts": {label: (m.get(where) or {}).get(key) for label, where, key in COUNTS},
        "lock_waiting": sum(v for k, v in waits.items() if k.startswith(("Lock:", "LWLock:"))),
        "waits": waits,
        "other_cpu_s": m["cpu_s"].get("other"),
        "load_before": round(load, 2),
        "start_p50_ms": ((m.get("starts") or {}).get("latency_ms") or {}).get("p50"),
        "probe_ms": doc["environment"].get("probe_ms_before"),
    }


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of the verified runs of one mode and N."""
    ok = [r for r in runs if r["ok"]]
    if not ok:
        return {}
    return {
        "instances_per_s": _median([r["instances_per_s"] for r in ok]),
        "cpu_ms": {label: _median([r["cpu_ms"][label] for r in ok]) for label, _ in ROLES},
        "counts": {label: _median([r["counts"][label] for r in ok]) for label, _, _ in COUNTS},
        "lock_waiting": _median([r["lock_waiting"] for r in ok]),
        "runs": len(ok),
    }


def projection(cpu_ms: dict[str, float], server_cores: int, pg_cores: int) -> dict[str, Any]:
    """Instances/s that ``server_cores`` cores of servers and ``pg_cores`` of PostgreSQL could each
    sustain at the measured CPU per instance, and which saturates first."""
    server = server_cores * 1000 / cpu_ms["server"] if cpu_ms["server"] else float("inf")
    pg = pg_cores * 1000 / cpu_ms["postgres"] if cpu_ms["postgres"] else float("inf")
    return {
        "servers_inst_per_s": round(server),
        "postgres_inst_per_s": round(pg),
        "first_to_saturate": "PostgreSQL" if pg < server else "the server processes",
        "worker_cores_needed": round(min(server, pg) * cpu_ms["workers"] / 1000, 1),
    }


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    load = (
        f"started during the run at N x {s['per_server_rate']:g}/s for {s['seconds']:g} s"
        if s.get("per_server_rate")
        else f"{s['instances']} instances pre-submitted"
    )
    lines = [
        f"scaling across server processes (issue #28): {s['steps']} steps, {load}, "
        f"{s['workers']} worker processes x {s['concurrency']}, {s['rounds']} round(s), N alternating; "
        f"{os.cpu_count()} CPU(s) here",
    ]
    for mode in s["modes"]:
        table = doc["medians"][mode]
        head = (
            f"{'N':>2} {'inst/s':>8} {'server':>7} {'pg':>7} {'workers':>8}  "
            + " ".join(f"{label:>14}" for label, _, _ in COUNTS)
            + f" {'lock waiting':>12}"
        )
        lines += [
            "",
            f"{mode} (CPU ms per instance by role; counts per instance; medians)",
            head,
            "-" * len(head),
        ]
        base = table.get(str(s["servers"][0]), {})
        for n in s["servers"]:
            row = table.get(str(n), {})
            if not row:
                lines.append(f"{n:>2} no verified run")
                continue
            c = row["cpu_ms"]
            lines.append(
                f"{n:>2} {row['instances_per_s']:>8.1f} {c['server']:>7.2f} {c['postgres']:>7.2f} {c['workers']:>8.2f}  "
                + " ".join(f"{_f(row['counts'][label], '.3f'):>14}" for label, _, _ in COUNTS)
                + f" {_f(row['lock_waiting'], '.2f'):>12}"
            )
        for n in s["servers"][1:]:
            row = table.get(str(n), {})
            if row and base:
                ratios = ", ".join(
                    f"{label} {row['cpu_ms'][label] / base['cpu_ms'][label]:.2f}"
                    for label, _ in ROLES
                    if base["cpu_ms"][label]
                )
                lines.append(f"   N={n} against N={s['servers'][0]}, CPU per instance: {ratios}")
        p = doc["projection"].get(mode)
        if p:
            lines.append(
                f"   projection ({s['server_cores']} server cores, a separate {s['pg_cores']}-core PostgreSQL, "
                f"at N={s['servers'][-1]}'s costs): servers {p['servers_inst_per_s']:,} inst/s, PostgreSQL "
                f"{p['postgres_inst_per_s']:,} inst/s -> first to saturate: {p['first_to_saturate']}; "
                f"workers would need about {p['worker_cores_needed']} cores"
                + (
                    f" (costs at {s['per_server_rate']:g} inst/s a server, where groups are smaller than "
                    "at saturation: a lower bound)"
                    if s.get("per_server_rate")
                    else ""
                )
            )
    lines += ["", "runs (mode, N, inst/s, load average before, other processes' CPU s):"]
    for mode, n, r in doc["sequence"]:
        shown = (
            f"{r['instances_per_s']:.1f} inst/s, load {r['load_before']}, other {r['other_cpu_s']}"
            + (f", start p50 {r['start_p50_ms']} ms" if r.get("start_p50_ms") is not None else "")
            if r["ok"]
            else f"FAILED {r['problems']}"
        )
        lines.append(f"  {mode} N={n}: {shown}")
    return "\n".join(lines)


def _f(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--servers", default="1,2,4", help="comma-separated server process counts (default 1,2,4)")
    p.add_argument("--modes", default="SERVER,LOCAL_SYNC,LOCAL_ASYNC")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument(
        "--per-server-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="start the instances during the run at N x R a second (equal load per server); 0: "
        "pre-submit them and drain as fast as the machine goes (default)",
    )
    p.add_argument(
        "--seconds", type=float, default=10.0, help="with --per-server-rate: seconds of starts a run"
    )
    p.add_argument("--server-cores", type=int, default=16, help="cores for the servers in the projection")
    p.add_argument("--pg-cores", type=int, default=16, help="PostgreSQL's cores in the projection")
    p.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test",
    )
    p.add_argument("--json", action="store_true", help="the whole document on stdout (the table on stderr)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        counts = [int(x) for x in args.servers.split(",") if x.strip()]
    except ValueError:
        counts = []
    if args.per_server_rate < 0 or args.seconds <= 0:
        print("scaling: --per-server-rate must be >= 0 and --seconds > 0", file=sys.stderr)
        return 2
    if not counts or min(counts) < 1 or args.rounds < 1:
        print("scaling: --servers must list counts >= 1 (e.g. 1,2,4) and --rounds be >= 1", file=sys.stderr)
        return 2
    modes = [m.strip().upper() for m in args.modes.split(",") if m.strip()]
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {m: {n: [] for n in counts} for m in modes}
    sequence = []
    for r in range(args.rounds):
        for mode in modes:
            order = counts[r % len(counts) :] + counts[: r % len(counts)]  # N rotates round by round
            for n in order:
                result = one_run(mode, n, args)
                runs[mode][n].append(result)
                sequence.append((mode, n, result))
                shown = (
                    f"{result['instances_per_s']} inst/s" if result["ok"] else f"FAILED {result['problems']}"
                )
                print(f"round {r + 1} {mode} N={n}: {shown}", file=sys.stderr, flush=True)
    table = {m: {str(n): medians(runs[m][n]) for n in counts} for m in modes}
    proj = {}
    for m in modes:
        last = table[m].get(str(counts[-1]))
        if last:
            proj[m] = projection(last["cpu_ms"], args.server_cores, args.pg_cores)
    settings = dict(vars(args), servers=counts, modes=modes)
    doc = {"settings": settings, "medians": table, "projection": proj, "sequence": sequence}
    if args.json:
        print(render(doc), file=sys.stderr)
        print(json.dumps(doc, indent=2))
    else:
        print(render(doc))
    return 0 if all(r["ok"] for _, _, r in sequence) else 1


if __name__ == "__main__":
    sys.exit(main())
