"""Stopping a session cluster that live applications use (issue 21, item 8): refused, naming
them, unless forced. A real SQLite store; the cluster records no process, so nothing is
started or killed here (the stop of real processes: tests/e2e/test_clusters_api.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.errors import ClusterConflict
from stoker.manager.sessions import SessionClusters
from stoker.store import open_store
from stoker.types import ClusterState, JobKind, JobState, job_id


def test_a_cluster_in_use_is_stopped_only_when_forced(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.create_cluster("shared", "session", {"workers": 1})
        store.update_cluster("shared", state=ClusterState.RUNNING)
        spec = {"kind": "application", "cluster": "shared"}
        for name in ("etl", "report"):
            store.create_job(job_id(name), name, spec, {}, kind=JobKind.APPLICATION)
        store.request_cancel(job_id("report"))  # CREATED: ended at once, no longer a user
        sessions = SessionClusters(store, tmp_path / "clusters")

        with pytest.raises(ClusterConflict) as refused:
            sessions.stop("shared")
        assert "used by live application(s) etl" in str(refused.value)
        assert "--force" in str(refused.value)
        assert store.get_cluster("shared").state == ClusterState.RUNNING  # nothing changed

        out = sessions.stop("shared", force=True)
        assert (out["state"], out["used_by"]) == ("STOPPED", ["etl"])
        assert store.get_job(job_id("etl")).state == JobState.CREATED  # not stopped by it
    finally:
        store.close()
