"""Process identity: who owns an attempt, and whether that process is provably gone.

Shared by the runtime (an attempt's owner is its driver) and the job manager (it watches the
drivers it started). No Spark here: the manager imports it.
"""

from __future__ import annotations

import os
import socket

from stoker.store import Owner


def process_start_marker(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot): distinguishes reused pids."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            stat = fh.read()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "unknown"


def this_owner() -> Owner:
    """This process as an attempt's owner: host, pid and the pid's start marker."""
    pid = os.getpid()
    return Owner(host=socket.gethostname(), pid=pid, pid_started=process_start_marker(pid))


def owner_is_dead(owner: Owner) -> bool:
    """True only when we can see for sure that the owner's process is gone (same host)."""
    if owner.host != socket.gethostname():
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    marker = process_start_marker(owner.pid)
    return marker != "unknown" and owner.pid_started != "unknown" and marker != owner.pid_started


__all__ = ["owner_is_dead", "process_start_marker", "this_owner"]
