"""Fault injection for crash tests, shipped with the package.

Set ``STOKER_FAULT=<step>:<epoch>`` (several separated by commas) and the driver kills itself
with SIGKILL when it reaches that step of that epoch: the whole process group when the driver
leads one (as the CLI's driver does), so the Spark JVM and Python workers die with it.

Steps: ``after_pin``, ``after_transform``, ``after_prepare``, ``after_decide``, ``after_commit``,
``before_spark_commit``, ``in_recovery``; and, without an epoch, ``sink_recovery_at_<phase>``
right before a sink's ``recover`` in recovery run at an attempt's ``start``, at its ``end``, or
by the janitor's ``cleanup``. The Kafka sink's commit: ``kafka_in_txn`` (a transaction's rows
produced, not committed) and ``kafka_after_txn`` (a transaction committed in Kafka, before the
next one and before the store records the commit). The Delta sink's commit: ``delta_after_log``
(the epoch's Delta commit in the table's log, before the store records it). The Iceberg sink's
commit: ``iceberg_before_catalog`` (the snapshot's manifests written, the catalog not yet
pointing at them) and ``iceberg_after_commit`` (the catalog's commit done, before the store
records it). An application driver whose ``main`` raised: ``app_main_raised`` (main's error
recorded on the attempt, before the job manager's decision) and ``app_canceling_jobs`` (the
restart strategy gave up and the jobs were asked to cancel, before they have stopped). A
local run about to start Spark (its run mark held, no attempt yet): ``before_spark``.

``stall_<step>:<epoch>`` (e.g. ``stall_after_prepare:2``) hangs there for ever instead: a
driver that stops making progress with its parts prepared (a cancel timeout must kill it).

``sigstop_<step>[:<epoch>]`` freezes the driver there with a real SIGSTOP, once per process:
its whole process group when it leads one (the JVM and its Python workers too), so that the
test resumes it with one SIGCONT to the group when it wants, e.g. a recovery frozen while the
next attempt runs. (Stopping the driver alone would not hold: a driver started in a session of
its own leads an orphaned process group, and when any other member of such a group exits, a
Spark worker say, the kernel sends the group SIGHUP and SIGCONT.) Test-only, as every fault.

Faults inside a Spark task (the PostgreSQL sink's writer), on the task's first attempt only
(``TaskContext.attemptNumber() == 0``), so that Spark's retry or speculative copy succeeds:

- ``task_after_prepare:<epoch>:<partition>``: the Python worker SIGKILLs itself right after
  ``PREPARE TRANSACTION``; its part stays prepared and Spark retries the task.
- ``task_zombie_prepare:<epoch>:<partition>``: the task forks a detached process that holds the
  task's open transaction (rows written, not prepared), waits until the epoch has been
  committed (its partition's kept part is visible, or a later epoch's is), then prepares under
  the first attempt's own gid: a zombie task attempt whose PREPARE comes too late. The task
  itself fails, so Spark retries it. The process gives up after 300 s.
- ``task_slow:<epoch>:<partition>:<seconds>``: the task sleeps that long right after its
  PREPARE (the dangerous order: prepared, then maybe not kept), so that Spark speculates.

Local-mode Python workers inherit ``STOKER_FAULT`` from the driver; on a standalone cluster
pass it with ``-D spark.executorEnv.STOKER_FAULT=...``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

STEPS = (
    "after_pin",
    "after_transform",
    "after_prepare",
    "after_decide",
    "after_commit",
    "before_spark_commit",
    "in_recovery",
    "sink_recovery_at_start",
    "sink_recovery_at_end",
    "sink_recovery_at_cleanup",
    "kafka_in_txn",
    "kafka_after_txn",
    "delta_after_log",
    "iceberg_before_catalog",
    "iceberg_after_commit",
    "app_main_raised",
    "app_canceling_jobs",
    "before_spark",
)


TASK_STEPS = ("task_after_prepare", "task_zombie_prepare", "task_slow")


def _items(raw: str) -> list[list[str]]:
    return [item.strip().split(":") for item in raw.split(",") if item.strip()]


def _planned() -> set[tuple[str, int]]:
    out = set()
    for fields in _items(os.environ.get("STOKER_FAULT", "")):
        if fields[0] in TASK_STEPS:
            continue
        out.add((fields[0], int(fields[1]) if len(fields) > 1 and fields[1] else -1))
    return out


_PLAN = _planned()
_STOPPED: set[str] = set()  # sigstop faults fire once per process


def _group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid``, read from /proc (this module imports nothing of
    stoker's: it runs in Spark's Python workers too)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid:  # state, ppid, pgrp after the name
            found.append(int(entry.name))
    return found


def fault_point(step: str, epoch: int = -1) -> None:
    """Die here if a crash at (step, epoch) was asked for."""
    if not _PLAN:
        return
    stop = f"sigstop_{step}"
    if ((stop, epoch) in _PLAN or (stop, -1) in _PLAN) and step not in _STOPPED:
        _STOPPED.add(step)
        sys.stderr.write(f"stoker.testing: injected sigstop at {step} epoch {epoch}\n")
        sys.stderr.flush()
        pid = os.getpid()
        if os.getpgid(0) == pid:  # the JVM and the Python workers first
            for other in _group_members(pid):
                if other != pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(other, signal.SIGSTOP)
        # Then this process, by the calling thread. A stop sent to a process (or its group)
        # is taken by one of its threads, which stops the others as they next enter the
        # kernel: the caller could run on for a while (seen here: into the decision's store
        # transaction, frozen holding SQLite's write lock). Sent to the calling thread, it
        # stops before the call returns, until the test's SIGCONT to the group.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        return
    stall = f"stall_{step}"
    if (stall, epoch) in _PLAN or (stall, -1) in _PLAN:
        sys.stderr.write(f"stoker.testing: injected stall at {step} epoch {epoch}\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)
    if (step, epoch) not in _PLAN and (step, -1) not in _PLAN:
        return
    sys.stderr.write(f"stoker.testing: injected crash at {step} epoch {epoch}\n")
    sys.stderr.flush()
    kill_self()


def kill_self() -> None:
    """SIGKILL this driver, with its process group when it leads one."""
    pid = os.getpid()
    if os.getpgid(0) == pid:
        os.killpg(pid, signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)


def task_fault(step: str, epoch: int, partition: int, attempt_number: int) -> list[str] | None:
    """The extra fields of a planned task fault ``step:<epoch>:<partition>[:...]`` when it
    applies to this task (first attempt only), else None.

    Read from the environment at each call: a Python worker may outlive the plan it started
    with only inside one test, and the check costs microseconds per task.
    """
    if attempt_number != 0 or step not in TASK_STEPS:
        return None
    for fields in _items(os.environ.get("STOKER_FAULT", "")):
        if (
            fields[0] == step
            and len(fields) >= 3
            and (fields[1], fields[2])
            == (
                str(epoch),
                str(partition),
            )
        ):
            return fields[3:]
    return None


def task_note(what: str) -> None:
    """Say on stderr (the executor's log) that a task fault fired."""
    sys.stderr.write(f"stoker.testing: injected {what}\n")
    sys.stderr.flush()


def kill_task_worker() -> None:
    """SIGKILL this Python worker (not its group: the executor JVM must live and retry)."""
    os.kill(os.getpid(), signal.SIGKILL)
