"""The store contract for ``fleet_snapshot()`` (``/metrics``' one read): the live records,
a count of every record by kind and state, the counters. SQLite and PostgreSQL alike."""

from __future__ import annotations

from stoker.store import Store
from stoker.types import AttemptState, JobKind, JobState
from tests.integration.store.support import JOB, OTHER, SPEC, running_job


def test_live_records_counts_by_state_and_counters_in_one_read(store: Store) -> None:
    att = running_job(store)
    store.create_job(OTHER, "other", SPEC, {})
    snap = store.fleet_snapshot()
    assert sorted(r.job_id for r in snap.live) == sorted([JOB, OTHER])
    assert snap.by_state == {
        (JobKind.JOB, JobState.RUNNING): 1,
        (JobKind.JOB, JobState.CREATED): 1,
    }
    assert snap.counters["attempts"] == 1
    store.finish_attempt(JOB, att.attempt, AttemptState.FINISHED, JobState.FINISHED)
    snap = store.fleet_snapshot()
    assert [r.job_id for r in snap.live] == [OTHER]  # ended: counted, not read
    assert snap.by_state == {
        (JobKind.JOB, JobState.FINISHED): 1,
        (JobKind.JOB, JobState.CREATED): 1,
    }
    assert snap.counters["attempts"] == 1 and snap.counters["epochs_committed"] == 0
    assert snap.counters == store.counts() | {"rescales": snap.counters["rescales"]}
