"""Fault injection for crash tests, shipped with the package.

Set ``STOKER_FAULT=<step>:<epoch>`` (several separated by commas) and the driver kills itself
with SIGKILL when it reaches that step of that epoch: the whole process group when the driver
leads one (as the CLI's driver does), so the Spark JVM and Python workers die with it.

Steps: ``after_pin``, ``after_transform``, ``after_prepare``, ``after_decide``, ``after_commit``,
``before_spark_commit``, ``in_recovery``.
"""

from __future__ import annotations

import os
import signal
import sys

STEPS = (
    "after_pin",
    "after_transform",
    "after_prepare",
    "after_decide",
    "after_commit",
    "before_spark_commit",
    "in_recovery",
)


def _planned() -> set[tuple[str, int]]:
    raw = os.environ.get("STOKER_FAULT", "")
    out = set()
    for item in raw.split(","):
        step, _, epoch = item.strip().partition(":")
        if step:
            out.add((step, int(epoch) if epoch else -1))
    return out


_PLAN = _planned()


def fault_point(step: str, epoch: int = -1) -> None:
    """Die here if a crash at (step, epoch) was asked for."""
    if not _PLAN or ((step, epoch) not in _PLAN and (step, -1) not in _PLAN):
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
