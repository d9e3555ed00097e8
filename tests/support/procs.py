"""The machine's process table, read from /proc: what a test started, what it left behind.

``start`` (clock ticks since boot) tells a process from a later one with its pid."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it; ``start`` (clock ticks since boot) tells reused pids."""

    pid: int
    ppid: int
    pgid: int
    start: str
    argv: tuple[str, ...]


def _read(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None  # exited; only its parent's wait is missing
    argv = tuple(raw.rstrip(b"\0").decode(errors="replace").split("\0")) if raw else ()
    return Proc(pid, int(fields[1]), int(fields[2]), fields[19], argv)


def processes() -> list[Proc]:
    """Every live (not zombie) process of the machine."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            p = _read(int(entry))
            if p is not None:
                out.append(p)
    return out


def forks_left_out(procs: Iterable[Proc]) -> list[Proc]:
    """``procs`` less the children forked by one of them and not yet exec'd: such a child
    carries its parent's command line until it execs (a driver launching its JVM, a JVM starting
    a Python worker) and is not a second process of that kind."""
    procs = list(procs)
    argv_of = {p.pid: p.argv for p in procs}
    return [p for p in procs if argv_of.get(p.ppid) != p.argv]


def process_tree(pgid: int | None = None, root: int | None = None) -> set[Proc]:
    """The members of process group ``pgid`` and/or process ``root``, with all descendants."""
    table = processes()
    found = {p for p in table if p.pgid == pgid or p.pid == root}
    while True:
        pids = {p.pid for p in found}
        more = {p for p in table if p.ppid in pids and p not in found}
        if not more:
            return found
        found |= more


def alive(p: Proc) -> bool:
    """Whether this very process (not a later one with its pid) still runs."""
    now = _read(p.pid)
    return now is not None and now.start == p.start


def still_alive(procs: Iterable[Proc]) -> list[Proc]:
    return sorted((p for p in procs if alive(p)), key=lambda p: p.pid)


def kill_all(procs: Iterable[Proc]) -> None:
    """SIGKILL these processes and their groups (never the test's own group)."""
    own = os.getpgrp()
    for p in procs:
        if not alive(p):
            continue
        if p.pgid not in (own, 0, 1):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGKILL)


def describe(procs: Iterable[Proc]) -> str:
    return "; ".join(f"{p.pid} (pgid {p.pgid}): {' '.join(p.argv)[:120]}" for p in procs)
