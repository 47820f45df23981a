"""bench/statement_counts.py on a made-up PostgreSQL log: the drain's statements, by kind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "statement_counts.py"

PREFIX = "2026-12-02 16:00:00.000 UTC [42] counter@"
LOG = [
    PREFIX + 'wiggle_bench_7 LOG:  execute <unnamed>: INSERT INTO "s".instances (id) VALUES ($1)',  # before
    PREFIX + "other_db LOG:  execute _pg3_1: SELECT 1",  # another database
    PREFIX + "wiggle_bench_7 LOG:  execute _pg3_0: BEGIN",
    PREFIX + 'wiggle_bench_7 LOG:  execute _pg3_1: SELECT t.id FROM "s".tokens t JOIN "s".instances i '
    "ON i.id = t.instance_id ORDER BY 1 LIMIT $3 FOR UPDATE OF t, i SKIP LOCKED",
    PREFIX + 'wiggle_bench_7 LOG:  execute _pg3_2: UPDATE "s".tokens SET node_id = $1 WHERE id = $2',
    PREFIX + "wiggle_bench_7 LOG:  execute _pg3_3: COMMIT",
    PREFIX + "wiggle_bench_7 DETAIL:  parameters: $1 = 'x'",  # not a statement
    PREFIX + "wiggle_bench_7 LOG:  statement: BEGIN",
    PREFIX + 'wiggle_bench_7 LOG:  execute _pg3_4: SELECT id FROM "s".instances WHERE id = ANY($1) '
    "ORDER BY id FOR UPDATE",
    PREFIX + 'wiggle_bench_7 LOG:  execute _pg3_5: WITH w0 AS (UPDATE "s".instances SET status = $1 '
    'WHERE id = $2) INSERT INTO "s".history (instance_id) VALUES ($3)',
    PREFIX + "wiggle_bench_7 LOG:  execute _pg3_3: COMMIT",
    PREFIX + 'wiggle_bench_7 LOG:  execute <unnamed>: SELECT i.* FROM "s".instances',  # after: reads
]


def test_counts_the_drain_of_the_last_benchmark_database(tmp_path: Path) -> None:
    log = tmp_path / "postgresql.log"
    log.write_text("\n".join(LOG) + "\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(log), "--steps", "2"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    counts = {}
    for line in result.stdout.splitlines()[1:]:
        *kind, n, per, _, _ = line.split()
        counts[" ".join(kind)] = (int(n), float(per))
    assert result.stdout.startswith("wiggle_bench_7: 8 statements in the drain, 2 steps")
    assert counts["BEGIN"] == (2, 1.0)  # the claim's transaction whole, the first insert not
    assert counts["COMMIT"] == (2, 1.0)
    assert counts["claim SELECT"] == (1, 0.5)
    assert counts["lock instances SELECT"] == (1, 0.5)
    assert counts["writes CTE (one statement)"] == (1, 0.5)
    assert counts["UPDATE tokens"] == (1, 0.5)
    assert counts["all"] == (8, 4.0)
    assert "INSERT instances" not in counts and "other" not in counts
