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

__all__ = ["PARENT_VARIABLE", "follow_parent", "parent_marker"]

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
