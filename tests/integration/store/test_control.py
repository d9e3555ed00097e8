"""The store contract for control versions.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import JobNotFound
from stoker.store import ControlSnapshot, Store
from stoker.types import ControlVersion, job_id
from tests.integration.store.support import CONFIG, JOB, SPEC, T0


def test_declare_defaults_versions_only_changes(store: Store, clock: ManualClock) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    assert store.declare_defaults(JOB, dict(CONFIG)) == ControlSnapshot(ControlVersion(0), CONFIG)
    assert store.get_job(JOB).control_version == 0

    clock.advance(1)
    changed = {"batch_rows": 200, "rate": 1.5}
    assert store.declare_defaults(JOB, changed) == ControlSnapshot(ControlVersion(1), changed)
    job = store.get_job(JOB)
    assert (job.control_version, job.updated_at) == (1, T0 + 1)
    assert store.declare_defaults(JOB, changed) == ControlSnapshot(ControlVersion(1), changed)

    # Back to the old values is a change too: a new version, the old ones untouched.
    assert store.declare_defaults(JOB, dict(CONFIG)) == ControlSnapshot(ControlVersion(2), CONFIG)
    assert store.control_snapshot(JOB) == ControlSnapshot(ControlVersion(2), CONFIG)
    assert store.control_snapshot(JOB, ControlVersion(0)) == ControlSnapshot(
        ControlVersion(0), CONFIG
    )
    assert store.control_snapshot(JOB, ControlVersion(1)) == ControlSnapshot(
        ControlVersion(1), changed
    )


def test_control_of_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.control_snapshot(job_id("nope"))
    with pytest.raises(JobNotFound):
        store.declare_defaults(job_id("nope"), {})
    store.create_job(JOB, "orders", SPEC, CONFIG)
    with pytest.raises(JobNotFound):
        store.control_snapshot(JOB, ControlVersion(9))
