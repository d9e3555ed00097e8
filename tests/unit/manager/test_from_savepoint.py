"""A submission that starts from a savepoint: the folder is checked, kept in the spec, and
handed to every attempt's driver in its environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_every_attempt_of_the_job_gets_the_folder_in_its_environment(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    argv = processes.driver_argv(
        "j", 2, "sqlite:///x.db", tmp_path, app, [], {}, 10.0, from_savepoint="/srv/sp"
    )
    assert argv.env[processes.FROM_SAVEPOINT_ENV] == "/srv/sp"
    assert "/srv/sp" not in " ".join(argv)  # in the environment, like the store URL
    plain = processes.driver_argv("j", 1, "sqlite:///x.db", tmp_path, app, [], {}, 10.0)
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
    argv = processes.driver_argv(
        "j", 1, "sqlite:///x.db", tmp_path, app, [], {}, 10.0, "/srv/sp", rewrite_output=True
    )
    assert argv.env[processes.REWRITE_OUTPUT_ENV] == "1"
    assert launch.REWRITE_OUTPUT_ENV == processes.REWRITE_OUTPUT_ENV
    plain = processes.driver_argv("j", 1, "sqlite:///x.db", tmp_path, app, [], {}, 10.0, "/s")
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
