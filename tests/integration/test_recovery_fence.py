"""A recovery frozen at the end of one attempt must not undo the next attempt's parts.

Real ``stoker run`` drivers on Spark, a real PostgreSQL sink and a files sink (the ids app).
Attempt 1 is stopped by SIGTERM; the recovery it runs at its end is frozen by a real SIGSTOP
(the test-only fault ``sigstop_sink_recovery_at_end`` of :mod:`stoker.testing`: the driver
stops its process group right before a sink's ``recover``, a point no outside signal can hit;
the test resumes the group with SIGCONT). Attempt 2
starts meanwhile, prepares its first epoch and is frozen the same way right after that prepare
(``sigstop_after_prepare``). Then attempt 1 resumes and finishes its recovery, and only then
attempt 2 goes on to decide and commit.

Unfenced, the resumed recovery took attempt 2's prepared parts for leftovers and aborted them
(PostgreSQL's prepared transactions, the files sink's staging): attempt 2's commit found them
lost. Fenced, attempt 2 waits for attempt 1's recovery hold (taking it over once it lapses,
the holder being frozen) and the resumed recovery touches nothing of an attempt after 1: every
id reaches both sinks exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from stoker.procs import stat
from stoker.types import AttemptState
from tests.integration.test_crash import (
    JOB,
    RUN,
    STARTUP,
    assert_finished_exactly_once,
    committed,
    ids_env,
    opened,
    staged_leftovers,
    tail,
    wait_exit,
    wait_for,
)
from tests.support import APPS, kill_group, pg_prepared, start_driver, wait_group_gone

pytestmark = [pytest.mark.spread, pytest.mark.timeout(1200)]

SUSPENDED_RC = 13  # stoker.errors.JobSuspended


def start(state: Path, env: dict[str, str], log: Path, lease: str) -> subprocess.Popen[bytes]:
    return start_driver(
        APPS / "ids_app.py",
        "-D",
        f"stoker.state_dir={state}",
        "-D",
        f"stoker.lease_ttl={lease}",
        env=env,
        log=log,
    )


def frozen_at(proc: subprocess.Popen[bytes], log: Path, step: str) -> bool:
    """The driver stopped itself at ``step`` (its log says so, the kernel shows it stopped)."""
    said = f"injected sigstop at {step}" in log.read_text(errors="replace")
    st = stat(proc.pid)
    return said and st is not None and st.state == "T"


def test_a_frozen_end_of_attempt_recovery_leaves_the_next_attempts_parts_alone(
    tmp_path: Path, pg_dsn: str
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    total, per_epoch = 20_000, 1_000
    env = ids_env(out, pg_dsn, total, per_epoch)
    first = second = None
    try:
        # Attempt 1: a short lease, so that its recovery hold lapses soon once it is frozen.
        first = start(state, {**env, "STOKER_FAULT": "sigstop_sink_recovery_at_end"}, log1, "10s")
        wait_for(lambda: committed(state) >= 2, "two epochs of attempt 1", first, log1)
        os.kill(first.pid, signal.SIGTERM)  # the driver only: it stops gracefully, SUSPENDED
        wait_for(
            lambda: frozen_at(first, log1, "sink_recovery_at_end"),
            "attempt 1 frozen in its end-of-attempt recovery",
            first,
            log1,
            timeout=RUN,
        )

        # Attempt 2: a long lease, so that being frozen after its prepare does not fence it.
        second = start(state, {**env, "STOKER_FAULT": "sigstop_after_prepare"}, log2, "300s")
        wait_for(
            lambda: frozen_at(second, log2, "after_prepare"),
            "attempt 2 frozen right after its first prepare",
            second,
            log2,
            timeout=STARTUP + 60,
        )
        gids = pg_prepared(pg_dsn)
        assert gids and all(g.split(":")[3] == "2" for g in gids), (gids, tail(log2))
        staged = [n.partition(".owner=")[0] for n in staged_leftovers(out)]
        assert len(staged) == 1 and staged[0].endswith(".attempt=2"), staged

        # Attempt 1's recovery resumes and finishes; its driver exits, suspended.
        os.killpg(first.pid, signal.SIGCONT)
        rc1 = wait_exit(first, log1)
        wait_group_gone(first.pid)
        assert rc1 == SUSPENDED_RC, f"attempt 1 exited {rc1}\n{tail(log1)}"

        # Attempt 2 decides and commits the parts it prepared, then runs to the end.
        os.killpg(second.pid, signal.SIGCONT)
        rc2 = wait_exit(second, log2)
        wait_group_gone(second.pid)
        assert rc2 == 0, f"attempt 2 failed, rc {rc2}\n{tail(log1)}\n{tail(log2)}"
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                kill_group(p)  # SIGKILL ends a stopped process as well

    assert_finished_exactly_once(state, out, pg_dsn, total, log2)
    with opened(state) as st:
        attempts = [(a.attempt, a.state) for a in st.list_attempts(JOB)]
    assert attempts == [(1, AttemptState.SUSPENDED), (2, AttemptState.FINISHED)], attempts
