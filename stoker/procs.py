"""Processes as the kernel shows them (``/proc``), and process identity.

The one place that reads ``/proc``: a process's stat (state, parent, group, start time), its
command line, the members of a process group, every process of the machine, the machine's
memory. Identity: who owns an attempt (host, pid and the pid's start time, which tells a
reused pid), and whether that process is provably gone.

A host is :func:`host_id`: the host name, the kernel's boot id and this process's pid
namespace (``STOKER_HOST_ID`` when the operator sets one). A pid means something only within
one pid namespace of one boot: two containers that share a host name (or a machine id baked
into their image) are different hosts here, and a process recorded before a reboot is never
taken for one running now. Only the processes of this host are ever judged dead, adopted or
killed; another host's are left to their lease.

Shared by the runtime (an attempt's owner is its driver) and the job manager (it watches the
drivers and the cluster JVMs it started). No Spark here: the manager imports it.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stoker.store import Owner

_PROC = "/proc"
# process_start_marker's answer when the start time cannot be read.
UNKNOWN = "unknown"
_PF_EXITING = 0x4  # include/linux/sched.h


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says of one process (the fields stoker reads)."""

    pid: int
    state: str  # R, S, D, Z (zombie: exited, not yet collected by its parent), ...
    ppid: int
    pgid: int
    # The kernel's start time (clock ticks since boot), as written: with the pid, it tells one
    # process from a later one that reuses its pid.
    started: str
    flags: int = 0  # the kernel's task flags (PF_*)

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def exiting(self) -> bool:
        """Dying or dead: a zombie, or its exit under way (PF_EXITING; a SIGKILL sets it
        before the process's files, its sockets, are closed)."""
        return self.state in ("Z", "X") or bool(self.flags & _PF_EXITING)


def stat(pid: int) -> ProcStat | None:
    """``pid``'s stat, or None when there is no such process (or it cannot be read)."""
    try:
        with open(f"{_PROC}/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
        # The command name, in parentheses, may hold spaces and parentheses: split after it.
        fields = text.rsplit(")", 1)[1].split()
        return ProcStat(pid, fields[0], int(fields[1]), int(fields[2]), fields[19], int(fields[6]))
    except (OSError, IndexError, ValueError):
        return None


def cmdline(pid: int) -> list[str] | None:
    """``pid``'s argv, or None when there is no such process; [] for a zombie or a kernel
    thread (they have none)."""
    try:
        with open(f"{_PROC}/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def pids() -> list[int]:
    """The pids of every process of the machine now."""
    try:
        return sorted(int(name) for name in os.listdir(_PROC) if name.isdigit())
    except OSError:
        return []


def all_stats() -> Iterator[ProcStat]:
    """The stat of every process of the machine (those that exit meanwhile are skipped)."""
    for pid in pids():
        found = stat(pid)
        if found is not None:
            yield found


def group_pids(pgid: int, started_since: int = 0) -> list[int]:
    """Live (not zombie) pids of process group ``pgid`` that started no earlier than
    ``started_since`` (clock ticks since boot)."""
    return [
        s.pid
        for s in all_stats()
        if s.pgid == pgid and not s.zombie and int(s.started) >= started_since
    ]


def memory_total_mb() -> int | None:
    """This machine's MemTotal in MiB, or None where ``/proc/meminfo`` cannot be read."""
    try:
        with open(f"{_PROC}/meminfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_start_marker(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot): distinguishes reused pids;
    ``"unknown"`` when there is no such process."""
    found = stat(pid)
    return UNKNOWN if found is None else found.started


HOST_ID_ENV = "STOKER_HOST_ID"
_HOST_ID_MAX = 200
_host_id: str | None = None


def host_id() -> str:
    """This host as process records name it: ``STOKER_HOST_ID`` if set, else
    ``<host name>/<boot id, 8>/<pid namespace>``. Computed once per process."""
    global _host_id
    if _host_id is None:
        _host_id = _make_host_id()
    return _host_id


def _make_host_id() -> str:
    given = os.environ.get(HOST_ID_ENV, "").strip()
    if given:
        if len(given) > _HOST_ID_MAX or any(c.isspace() for c in given):
            raise ValueError(
                f"{HOST_ID_ENV} must be at most {_HOST_ID_MAX} characters without spaces"
            )
        return given
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip().replace("-", "")[:8] or "noboot"
    except OSError:
        boot = "noboot"
    try:
        ns = os.readlink(f"{_PROC}/self/ns/pid")  # "pid:[4026531836]"
        pidns = ns.partition("[")[2].rstrip("]") or ns
    except OSError:
        pidns = "nons"
    return f"{socket.gethostname()}/{boot}/{pidns}"


def is_loopback(host: str) -> bool:
    """Whether a host name or address (no port, no brackets) is this machine's loopback:
    ``localhost`` or an address of 127.0.0.0/8 or ``::1``."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_this_host(host: str) -> bool:
    """Whether a process recorded on ``host`` runs (or ran) on this one: its pid means
    something here."""
    return host == host_id()


def this_owner() -> Owner:
    """This process as an attempt's owner: host, pid and the pid's start marker."""
    pid = os.getpid()
    return Owner(host=host_id(), pid=pid, pid_started=process_start_marker(pid))


def _children() -> list[int]:
    """Pids of this process's children (every thread's), or [] where the kernel has no
    ``/proc/<pid>/task/<tid>/children``; then a scan of every process."""
    me = os.getpid()
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return []
    listed = False
    for tid in tasks:
        try:
            with open(f"/proc/{me}/task/{tid}/children", encoding="ascii") as f:
                found.extend(int(x) for x in f.read().split())
            listed = True
        except (OSError, ValueError):
            continue
    if not listed:
        found = [s.pid for s in all_stats() if s.ppid == me]
    return found


def reap_adopted() -> list[int]:
    """Collect the exit status of the zombie children this process did not start, and return
    their pids.

    When this process is PID 1 (a container's entry point) or a child subreaper, the kernel
    hands it every orphan below it: a driver's JVM that outlives its Python for a moment is
    one. Nobody waits for those, and they stay ``<defunct>`` for as long as this process lives.
    A child this process started leads its own process group
    (``start_new_session``) or shares ours (a short helper run to its end); an adopted one is in
    a group of someone else's. Only those are collected: the exit code of a child we started
    belongs to its ``Popen``."""
    mine = os.getpgrp()
    reaped = []
    for pid in _children():
        st = stat(pid)
        if st is None or st.state != "Z" or st.pgid in (pid, mine):
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done:
            reaped.append(pid)
    return reaped


def owner_is_dead(owner: Owner) -> bool:
    """True only when we can see for sure that the owner's process is gone (this host)."""
    if not is_this_host(owner.host):
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    marker = process_start_marker(owner.pid)
    return marker != UNKNOWN and owner.pid_started != UNKNOWN and marker != owner.pid_started


def owner_is_alive(owner: Owner) -> bool:
    """True only when we can see for sure that the owner's process runs: on this host, with
    the start marker it was recorded with (not a later process that took its pid)."""
    if not owner.pid or not is_this_host(owner.host) or owner.pid_started == UNKNOWN:
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: its marker still tells
    return process_start_marker(owner.pid) == owner.pid_started


def remove_orphaned_folders(prefix: str) -> None:
    """Remove the temp dir's folders named ``<prefix><pid>-...`` whose process is gone (it
    was killed before its ``finally`` removed them); another user's live process's stay."""
    for old in Path(tempfile.gettempdir()).glob(prefix + "*"):
        pid = old.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except PermissionError:  # another user's live process
            continue


def forget_interrupt() -> None:
    """Let this process end with the exit code it chose after a signal stopped it.

    CPython (3.11 here) notes a KeyboardInterrupt that leaves code it runs from a string
    (``exec``/``eval``: dataclasses and namedtuples build their methods so, while a module is
    imported) and, in a process started as ``python -m``, ends by SIGINT at exit whatever code
    it asked for. A driver whose SIGTERM landed while the app was imported exited -2, not 13
    (suspended), and the chaos checker could not explain it (CI, seed 9002). Running a string
    that ends normally clears the note; called once the process has handled every signal.
    """
    exec("pass")  # a constant string: the only way to clear the note from Python


__all__ = [
    "UNKNOWN",
    "ProcStat",
    "all_stats",
    "cmdline",
    "forget_interrupt",
    "group_pids",
    "host_id",
    "is_this_host",
    "memory_total_mb",
    "owner_is_alive",
    "owner_is_dead",
    "pids",
    "process_start_marker",
    "reap_adopted",
    "remove_orphaned_folders",
    "stat",
    "this_owner",
]
