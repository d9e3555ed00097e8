"""The pipeline's sinks changed between a crash and the restart.

Real ``stoker run`` drivers (the ids app: a files sink, plus a PostgreSQL sink when
``IDS_PG_DSN`` is set), killed with SIGKILL right after epoch 3 was DECIDED and before any sink
committed it (``STOKER_FAULT=after_decide:3``), then restarted with the other set of sinks.

- A sink removed: its part of the decided epoch is committed all the same, from the
  descriptor the store recorded for it (the user's code no longer names it), and nothing is
  left prepared in PostgreSQL. Its later epochs simply are not written.
- A sink added: it has no part in the decided epoch, and recovery does not ask for one; it
  takes part from the next epoch on.
Both are said in the restarted driver's log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.types import JobState, TxnState
from tests.integration.test_crash import (
    JOB,
    epochs,
    ids_env,
    opened,
    staged_leftovers,
    start_ids,
    tail,
    wait_exit,
)
from tests.support import exactly_once, file_sink_ids, pg_ids, pg_prepared, wait_group_gone

pytestmark = [pytest.mark.spread, pytest.mark.timeout(1200)]

TOTAL, PER_EPOCH, CRASH_EPOCH = 10_000, 1_000, 3


def crash_after_decide(state: Path, env: dict[str, str], log: Path) -> None:
    """Run 1 dies by SIGKILL right after epoch 3 is decided, before its commit."""
    p = start_ids(state, {**env, "STOKER_FAULT": f"after_decide:{CRASH_EPOCH}"}, log)
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    assert rc == -9, f"expected death by SIGKILL, got rc {rc}\n{tail(log)}"
    assert str(epochs(state)[CRASH_EPOCH].state) == "DECIDED", tail(log)


def run_to_the_end(state: Path, env: dict[str, str], log: Path) -> str:
    """Run 2, to its end; its log."""
    p = start_ids(state, env, log)
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    assert rc == 0, f"restarted driver failed, rc {rc}\n{tail(log)}"
    with opened(state) as st:
        job = st.get_job(JOB)
        assert job.state == JobState.FINISHED, job
        assert st.list_txns(JOB, TxnState.PREPARED) == []
    return log.read_text(errors="replace")


def test_a_sink_removed_after_a_decision_still_commits_its_decided_part(
    tmp_path: Path, pg_dsn: str
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    env = ids_env(out, pg_dsn, TOTAL, PER_EPOCH)
    crash_after_decide(state, env, log1)
    assert pg_prepared(pg_dsn), "epoch 3's PostgreSQL part should be prepared after the crash"

    text = run_to_the_end(state, {**env, "IDS_PG_DSN": ""}, log2)  # the PostgreSQL sink removed

    assert pg_prepared(pg_dsn) == [], f"prepared transactions left\n{tail(log2)}"
    # The removed sink holds exactly the epochs decided while it was part of the pipeline.
    exactly_once(pg_ids(pg_dsn, "ids"), (CRASH_EPOCH + 1) * PER_EPOCH)
    exactly_once(file_sink_ids(out), TOTAL)
    assert staged_leftovers(out) == []
    assert "sink 'postgres:ids' was removed" in text, tail(log2)


# The removed sink's decided part (recovery rebuilds the sink) is in every lane; the added one
# in the whole suite.
@pytest.mark.variant
def test_a_sink_added_after_a_decision_starts_at_the_next_epoch(
    tmp_path: Path, pg_dsn: str
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    env = ids_env(out, pg_dsn, TOTAL, PER_EPOCH)
    crash_after_decide(state, {**env, "IDS_PG_DSN": ""}, log1)  # the files sink alone

    text = run_to_the_end(state, env, log2)  # the PostgreSQL sink added

    exactly_once(file_sink_ids(out), TOTAL)
    table = pg_ids(pg_dsn, "ids")
    first = (CRASH_EPOCH + 1) * PER_EPOCH
    assert sorted(table) == list(range(first, TOTAL)) and set(table.values()) == {1}, (
        f"the added sink holds {len(table)} ids from {min(table, default=None)}\n{tail(log2)}"
    )
    assert pg_prepared(pg_dsn) == []
    assert "sink 'postgres:ids' is new" in text, tail(log2)
