"""Statements per step of a benchmark drain, counted from PostgreSQL's own statement log.

PostgreSQL logs every statement of a role whose ``log_statement`` is ``all``; this script reads
such a log, keeps the lines of one database (a ``wiggle bench`` run's ``wiggle_bench_<pid>``)
from its first claim to its last write, each with its transaction's BEGIN or COMMIT (the drain:
the pre-submission's inserts come before it, the verification's reads after it), and counts them
by kind, per step. Used for bench/README.md, "Round nine (stepcost)":

    psql -c "CREATE ROLE wiggle_count LOGIN SUPERUSER" -c "ALTER ROLE wiggle_count SET log_statement = 'all'"
    wc -l < /var/log/postgresql/postgresql-15-main.log      # the log's length before the run
    wiggle bench --modes SERVER --steps 5 --instances 300 \\
        --database-url postgresql://wiggle_count@127.0.0.1:5432/test
    python bench/statement_counts.py /var/log/postgresql/postgresql-15-main.log --from-line N \\
        --steps 1500                                        # instances x steps of the run

The log line prefix must name the database (``%d``, as Debian's default ``%m [%p] %q%u@%d``).
A pipelined or prepared statement is logged at its execution (``execute <name>: ...``); a
statement run by ``executemany`` is logged once per row, as it is executed once per row.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

#: (kind, pattern of the statement's text), first match wins.
KINDS: tuple[tuple[str, str], ...] = (
    ("BEGIN", r"^BEGIN"),
    ("COMMIT", r"^COMMIT"),
    ("ROLLBACK", r"^ROLLBACK"),
    ("claim SELECT", r"FOR UPDATE OF t, i SKIP LOCKED"),
    ("lock instances SELECT", r"FROM \S+\.instances WHERE id = ANY\(\$1\) ORDER BY id FOR UPDATE"),
    ("load tokens SELECT", r"^SELECT .* FROM \S+\.tokens WHERE instance_id = ANY"),
    ("writes CTE (one statement)", r"^WITH .*(UPDATE|INSERT INTO)"),
    ("UPDATE instances", r"^UPDATE \S+\.instances"),
    ("UPDATE tokens", r"^UPDATE \S+\.tokens"),
    ("INSERT tokens", r"^INSERT INTO \S+\.tokens"),
    ("INSERT history", r"^INSERT INTO \S+\.history"),
    ("INSERT instances", r"^INSERT INTO \S+\.instances"),
    ("NOTIFY", r"pg_notify"),
    ("next-ready SELECT", r"LATERAL \(SELECT available_at"),
    ("clock duties", r"lease_expires_at <= |SELECT LEAST\(|pg_try_advisory_lock|deadline_at <= "),
)
WRITES = {
    "writes CTE (one statement)",
    "UPDATE instances",
    "UPDATE tokens",
    "INSERT tokens",
    "INSERT history",
}

LINE = re.compile(r"@(?P<db>\S+) LOG:  (?:statement|execute [^:]+): (?P<sql>.*)$")


def kind_of(text: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, text):
            return kind
    return "other"


def drain(lines: list[str], database: str | None) -> tuple[str, list[str]]:
    """The database's statements from its first claim to its last write."""
    found: list[tuple[str, str]] = []
    for line in lines:
        m = LINE.search(line)
        if m and (database is None or m["db"] == database) and m["db"].startswith("wiggle_bench_"):
            found.append((m["db"], m["sql"]))
    if not found:
        raise SystemExit("no logged statement of a benchmark database in that part of the log")
    db = database or found[-1][0]
    kinds = [kind_of(sql) for d, sql in found if d == db]
    first = kinds.index("claim SELECT")
    last = max(i for i, k in enumerate(kinds) if k in WRITES)
    first -= first > 0 and kinds[first - 1] == "BEGIN"  # the transactions of both ends, whole
    last += last + 1 < len(kinds) and kinds[last + 1] == "COMMIT"
    return db, kinds[first : last + 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="PostgreSQL's log file")
    parser.add_argument("--from-line", type=int, default=1, help="first line of the run (1-based)")
    parser.add_argument("--database", help="the benchmark's database (default: the last one logged)")
    parser.add_argument("--steps", type=int, required=True, help="steps of the drain: instances x steps")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()[args.from_line - 1 :]
    db, kinds = drain(lines, args.database)
    counts = Counter(kinds)
    print(f"{db}: {len(kinds)} statements in the drain, {args.steps} steps")
    for kind, n in counts.most_common():
        print(f"  {kind:28s} {n:7d}  {n / args.steps:6.3f} per step")
    print(f"  {'all':28s} {len(kinds):7d}  {len(kinds) / args.steps:6.3f} per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
