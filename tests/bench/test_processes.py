"""The benchmark's CPU readings of other processes (wiggle/_bench/processes.py), on real processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wiggle._bench.processes import proc_cpu, thread_cpu

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

# burns about 40 ms of CPU in short slices, then says so and waits for its stdin to close
BURN = """
import sys, time
used = 0.0
while used < 0.04:
    began = time.process_time()
    while time.process_time() - began < 0.002:
        pass
    used = time.process_time()
    time.sleep(0.001)
print(time.process_time(), flush=True)
sys.stdin.read()
"""


def test_thread_cpu_reads_a_single_threaded_process_to_well_under_a_tick() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        own = float(proc.stdout.readline())  # the process's own reading, interpreter start included
        precise = thread_cpu(proc.pid)
        ticks = proc_cpu(proc.pid)
        assert precise is not None and ticks is not None
        # the process cannot have used less than it measured itself; nor more than its print
        assert own - 0.002 <= precise <= own + 0.005
        assert round(precise * 1e9) % 10_000_000 != 0  # nanoseconds, not a count of 10 ms ticks
        # the tick count is rounded down to 10 ms: never above the precise figure by a tick
        assert ticks <= precise + 0.01
    finally:
        proc.kill()
        proc.wait()
    assert thread_cpu(proc.pid) is None  # gone (and reaped): None, as proc_cpu says
    assert proc_cpu(proc.pid) is None
