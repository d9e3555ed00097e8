"""A submission that starts from a savepoint: the folder is checked, kept in the spec, and
handed to every attempt's driver in its environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stoker.driverargs import DriverArgs, DriverRole
from stoker.errors import InvalidInput
from stoker.manager import processes
from stoker.manager.submit import check_savepoint_source


def _savepoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "_savepoint.json").write_text(json.dumps({"format": 1, "job_id": "a", "epoch": 3}))
    return folder


def test_a_savepoint_folder_is_checked_and_resolved(tmp_path: Path) -> None:
    allowed = [tmp_path.resolve()]
    sp = _savepoint(tmp_path / "sp")
    assert check_savepoint_source(str(sp), allowed) == str(sp.resolve())
    (tmp_path / "empty").mkdir()
    outside = _savepoint(tmp_path.parent / f"{tmp_path.name}-outside")
    cases = {
        "sp": "must be an absolute path",
        str(tmp_path / "empty"): "is not a savepoint",
        str(tmp_path / "missing"): "is not a savepoint",
        str(outside): "outside the allowed folders",
        "": "expects a folder path",
    }
    for given, said in cases.items():
        with pytest.raises(InvalidInput) as e:
            check_savepoint_source(given, allowed)
        assert e.value.field == "from_savepoint" and said in str(e.value), str(e.value)
    (sp / "_savepoint.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(InvalidInput, match="format"):
        check_savepoint_source(str(sp), allowed)


def _job_argv(state: Path, app: Path, attempt: int, **given: Any) -> processes.DriverArgv:
    """A job driver's command line and environment as the manager makes them."""
    args = DriverArgs(
        role=DriverRole.JOB,
        name="j",
        attempt=attempt,
        store="sqlite:///x.db",
        state_dir=state,
        entrypoint=app,
        lease_ttl=10.0,
        **given,
    )
    return processes.DriverArgv.of(args)


def test_every_attempt_of_the_job_gets_the_folder_in_its_environment(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    argv = _job_argv(tmp_path, app, 2, from_savepoint="/srv/sp")
    assert argv.env[processes.FROM_SAVEPOINT_ENV] == "/srv/sp"
    assert "/srv/sp" not in " ".join(argv)  # in the environment, like the store URL
    plain = _job_argv(tmp_path, app, 1)
    assert processes.FROM_SAVEPOINT_ENV not in plain.env


def test_the_runtime_reads_the_same_variable() -> None:
    from stoker.runtime import launch

    assert launch.FROM_SAVEPOINT_ENV == processes.FROM_SAVEPOINT_ENV


def test_rewrite_output_goes_with_a_savepoint_into_the_spec_and_the_drivers_environment(
    tmp_path: Path,
) -> None:
    from stoker.manager.submit import Submission
    from stoker.runtime import launch

    app = tmp_path / "app.py"
    sub = Submission(app, from_savepoint="/srv/sp", rewrite_output_after_savepoint=True)
    sub.check_rewrite()
    assert sub.spec()["rewrite_output_after_savepoint"] is True
    assert "rewrite_output_after_savepoint" not in Submission(app, from_savepoint="/x").spec()
    with pytest.raises(InvalidInput) as e:
        Submission(app, rewrite_output_after_savepoint=True).check_rewrite()
    assert e.value.field == "rewrite_output_after_savepoint" and "from_savepoint" in str(e.value)
    argv = _job_argv(tmp_path, app, 1, from_savepoint="/srv/sp", rewrite_output=True)
    assert argv.env[processes.REWRITE_OUTPUT_ENV] == "1"
    assert launch.REWRITE_OUTPUT_ENV == processes.REWRITE_OUTPUT_ENV
    plain = _job_argv(tmp_path, app, 1, from_savepoint="/s")
    assert processes.REWRITE_OUTPUT_ENV not in plain.env


def test_a_job_submitted_from_a_savepoint_is_made_with_the_savepoints_uid(
    tmp_path: Path,
) -> None:
    """The restored job goes on with the savepoint's job's outputs: the sinks know them by that
    uid, so a second restore from the same savepoint finds the first one's epochs and is
    refused. The manager made the record with a fresh uid, which the driver then kept (chaos
    seed 118: a second restore wrote 800 ids twice)."""
    import asyncio

    from stoker.manager.submissions import JobSubmissions
    from stoker.store import open_store

    app = tmp_path / "app.py"
    app.write_text("")
    sp = tmp_path / "sp"
    sp.mkdir()
    manifest = {"format": 1, "job_id": "a", "epoch": 3, "uid": "4f1c0ffee"}
    (sp / "_savepoint.json").write_text(json.dumps(manifest))
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        subs = JobSubmissions(store, [tmp_path.resolve()], tmp_path / "jobs")
        b = subs.submit("b", str(app), from_savepoint=str(sp)).job
        c = asyncio.run(subs.submit_async("c", str(app), from_savepoint=str(sp))).job
        d = subs.submit("d", str(app)).job
    finally:
        store.close()
    assert b.uid == c.uid == "4f1c0ffee"
    assert d.uid and d.uid != "4f1c0ffee"  # a job of its own: a fresh uid


def test_the_manager_url_env_is_the_one_the_runtime_reads() -> None:
    from stoker.runtime.job import result

    assert result.MANAGER_URL_ENV == processes.MANAGER_URL_ENV


def test_fork_and_ignore_go_with_a_savepoint_into_the_spec_where_the_driver_reads_them(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from stoker.manager.submit import FORK_KEY, IGNORE_KEY, Submission, savepoint_uid
    from stoker.runtime import launch

    assert (launch.FORK_KEY, launch.IGNORE_KEY) == (FORK_KEY, IGNORE_KEY)
    app = tmp_path / "app.py"
    sp = tmp_path / "sp"
    sp.mkdir()
    (sp / "_savepoint.json").write_text(json.dumps({"format": 1, "job_id": "a", "uid": "u1"}))
    sub = Submission(app, from_savepoint=str(sp), fork=True, ignore_unreachable_stores=True)
    sub.check_rewrite()
    spec = sub.spec()
    assert spec[FORK_KEY] is True and spec[IGNORE_KEY] is True
    assert savepoint_uid(spec) is None  # a fork: a fresh uid, not the savepoint's
    assert savepoint_uid(Submission(app, from_savepoint=str(sp)).spec()) == "u1"
    with pytest.raises(InvalidInput) as e:
        Submission(app, fork=True).check_rewrite()
    assert e.value.field == "fork" and "from_savepoint" in str(e.value)
    Submission(app, ignore_unreachable_stores=True).check_rewrite()  # a restored job's resume
    job = SimpleNamespace(spec=spec)
    ctx = launch.LaunchContext()
    assert ctx.forks(job) and ctx.ignores_unreachable(job)
    assert not ctx.forks(SimpleNamespace(spec={})) and not ctx.forks(None)


def test_a_savepoint_restored_before_is_refused_at_submission_with_422_naming_the_job(
    tmp_path: Path,
) -> None:
    """What the lineage refuses without the pipeline is refused when the job is submitted
    (issue 40 item 1: a refused restore is a 4xx, and changes nothing), not by its driver
    after the job was made."""
    from fastapi.testclient import TestClient

    from stoker.manager import JobManager
    from stoker.server import create_app
    from stoker.store import SavepointRestore, open_store
    from stoker.types import JobId, JobState

    app_file = tmp_path / "app.py"
    app_file.write_text("")
    sp = tmp_path / "sp"
    (sp / "checkpoint").mkdir(parents=True)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    manifest = {"format": 1, "job_id": "a", "epoch": 3, "uid": "u1", "control_id": "c1"}
    (sp / "_savepoint.json").write_text(json.dumps({**manifest, "store": url}))
    store = open_store(url)
    try:
        # Restored into job b before (b's driver recorded it), b still running.
        store.create_job(JobId("b"), "b", {}, {}, uid="u1")
        store.set_job_state(JobId("b"), JobState.RUNNING)
        store.record_restore(
            SavepointRestore(
                savepoint="a/u1/c1", uid="u1", job_id=JobId("b"), store=url,
                state_dir=str(tmp_path / "jobs" / "b"), from_job_id=JobId("a"),
                from_uid="u1", epoch=3, path=str(sp), fork=False, sinks=(), restored_at=1.0,
            )  # type: ignore[arg-type]
        )  # fmt: skip
        manager = JobManager(store, tmp_path / "state", [tmp_path])
        body = {"job_id": "c", "entrypoint": str(app_file), "from_savepoint": str(sp)}
        with TestClient(create_app(manager)) as client:
            r = client.post("/v1/jobs", json=body)
            assert r.status_code == 422, r.text
            said = r.json()["error"]
            assert "was restored before into job 'b'" in said and "--fork" in said, said
            # A fork waits for b to end.
            r = client.post("/v1/jobs", json={**body, "fork": True})
            assert r.status_code == 422 and "is still RUNNING" in r.json()["error"], r.text
            assert [j.job_id for j in store.list_jobs()] == ["b"]  # nothing made
            store.set_job_state(JobId("b"), JobState.FAILED)
            store.set_resolved(JobId("b"))
            r = client.post("/v1/jobs", json={**body, "fork": True})
            assert r.status_code == 201, r.text
        manager.close()
        c = store.get_job(JobId("c"))
        assert c.uid and c.uid != "u1" and c.spec["fork"] is True
    finally:
        store.close()
