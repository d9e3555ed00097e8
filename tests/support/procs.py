"""The machine's process table, read from /proc: what a test started, what it left behind.

``start`` (clock ticks since boot) tells a process from a later one with its pid."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stoker import procs


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it; ``start`` (clock ticks since boot) tells reused pids."""

    pid: int
    ppid: int
    pgid: int
    start: str
    argv: tuple[str, ...]


def _read(pid: int) -> Proc | None:
    """``pid`` as stoker's one /proc reader (stoker.procs) sees it; None once it exited."""
    st = procs.stat(pid)
    argv = procs.cmdline(pid)
    if st is None or argv is None or st.state in ("Z", "X"):
        return None  # gone, or exited and only its parent's wait is missing
    return Proc(pid, st.ppid, st.pgid, st.started, tuple(argv))


def processes() -> list[Proc]:
    """Every live (not zombie) process of the machine."""
    return [p for p in map(_read, procs.pids()) if p is not None]


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


# Spark's Python processes of a driver -----------------------------------------------------------
# Started by the JVM they carry their module on the command line; forked by the driver's zygote
# (stoker/runtime/zygote.py: local masters) they carry the zygote's, and the JVM's child is the
# zygote's client (``zygote_client.py ... -m MODULE``), which only relays.
SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _zygotes(procs: Iterable[Proc]) -> dict[int, Proc]:
    return {p.pid: p for p in procs if p.argv[1:3] == ("-m", "stoker.runtime.zygote")}


def zygote_children(procs: Iterable[Proc]) -> list[Proc]:
    """The processes a zygote among ``procs`` forked (runners, daemons: not their workers)."""
    procs = list(procs)
    zygotes = _zygotes(procs)
    return [p for p in procs if p.ppid in zygotes]


def _started(p: Proc, module: str) -> bool:
    """``p`` runs ``module`` as the JVM started it, not the zygote's client for it."""
    return module in p.argv and not any(a.endswith("zygote_client.py") for a in p.argv)


def worker_daemons(procs: Iterable[Proc]) -> set[int]:
    """The pids of Spark's worker daemons (``pyspark.daemon``): started by the JVM, or forked
    by a zygote (a daemon makes a process group of its own; a runner stays in the zygote's)."""
    procs = list(procs)
    started = {p.pid for p in procs if _started(p, "pyspark.daemon")}
    return started | {p.pid for p in zygote_children(procs) if p.pgid == p.pid}


def python_workers(procs: Iterable[Proc]) -> list[Proc]:
    """Spark's Python task workers: what its worker daemons forked."""
    procs = list(procs)
    daemons = worker_daemons(procs)
    return [p for p in procs if p.ppid in daemons]


def source_runners(procs: Iterable[Proc]) -> list[Proc]:
    """The queries' source runners: started by the JVM, or forked by a zygote (in its group)."""
    procs = list(procs)
    zygotes = _zygotes(procs)
    forked = [p for p in zygote_children(procs) if p.pgid == zygotes[p.ppid].pgid]
    return [p for p in procs if _started(p, SOURCE_RUNNER)] + forked


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


def counting_wrappers(folder: Path, log: Path, names: Iterable[str]) -> set[str]:
    """Scripts in ``folder`` named like the commands in ``names``, each noting its name in
    ``log`` before it runs the real one: put ``folder`` first on a process's ``PATH`` to count
    what it starts by name (Hadoop's ``chmod`` and ``readlink``). The names wrapped (a command
    this machine lacks is left out)."""
    folder.mkdir(parents=True)
    made = set()
    for name in names:
        real = shutil.which(name)
        if real is None:
            continue
        script = folder / name
        script.write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec {real} "$@"\n')
        script.chmod(0o755)
        made.add(name)
    return made
