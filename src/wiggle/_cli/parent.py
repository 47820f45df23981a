"""A ``--processes N`` child ends when its parent does, however the parent ended.

``wiggle server --processes N`` and ``wiggle worker --processes N`` pass SIGTERM, SIGINT (and the
server SIGHUP) on to their children (wiggle/_cli/server.py ``_run_processes``,
wiggle/_cli/worker.py ``_supervise``). A parent killed with SIGKILL, or by the kernel's
out-of-memory killer, passes nothing on: its children used to run on, re-parented to init, holding
the gRPC port (a server restarted by hand then shared it with them) and their leases. On Linux each
child now asks the kernel for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and
stops gracefully as if the parent had passed SIGTERM on: a server drains its calls, a worker its
steps. Elsewhere nothing changes (a service manager that stops the whole group, as systemd's
``KillMode=mixed`` in deploy/systemd does, covers both).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

from .._env import take_variable

__all__ = ["PARENT_VARIABLE", "exit_status", "follow_parent", "killed_by", "parent_marker"]

log = logging.getLogger("wiggle")

#: The parent's process id, in each child's environment. Not a WIGGLE_* name: it is no setting,
#: and the unknown-variable warning (wiggle/_env.py) reads only those.
PARENT_VARIABLE = "_WIGGLE_PARENT_PID"

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def parent_marker() -> dict[str, str]:
    """The environment entry a parent gives each child it starts."""
    return {PARENT_VARIABLE: str(os.getpid())}


def follow_parent() -> bool:
    """In a child (the environment names its parent): have SIGTERM sent to this process when the
    parent dies; if it has died already (before this call: the request would never fire), send
    it now. True when the request was made; False where there is no such request (not Linux, no
    parent named, a libc without prctl)."""
    raw = take_variable(PARENT_VARIABLE)  # not passed on to what this process starts
    if not raw.isdigit() or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.debug("no parent-death signal (%s): this process outlives its group's parent", exc)
        return False
    if os.getppid() != int(raw):  # the parent died before the request: it never fires
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def killed_by(code: int) -> str:
    """How a child with this ``returncode`` ended, for a log line: "was killed by signal 9
    (SIGKILL)" for a negative code, "exited with code N" otherwise."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    return f"was killed by signal {-code} ({name})"


def exit_status(code: int) -> int:
    """A group parent's exit status for a child's ``returncode``: the shell's 128 + N for a child
    killed by signal N (a parent exiting N looked like the child's own exit(N)), the code as it is
    otherwise."""
    return 128 - code if code < 0 else code
