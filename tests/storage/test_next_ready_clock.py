"""The next-ready statement reads the rates' clock once (store.py ``next_ready_at``).

Its first half finds each queue's earliest step whose key's rate is open, its second the moment
of the keys' rates that hold the other steps back. Read row by row (``clock_timestamp()``), a
key's moment that came between the two readings was in neither half: the queue looked empty, and
a poll slept its whole wait (10 s by default) with the step due. Logged on a real server under a
step's rate of 150 a second: 4 such waits in 300 claims."""

from __future__ import annotations

from wiggle._storage.postgres.statements import Queries


def test_the_next_ready_statement_reads_the_clock_once() -> None:
    text = Queries("s").next_ready
    assert text.count("clock_timestamp()") == 1, text
    assert text.startswith("WITH clock AS MATERIALIZED"), text
