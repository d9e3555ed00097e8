"""Issue 23 item 11: the command a finished run prints to read its job names what is true where
the job ran: the job manager that started it, else its state folder, else its store."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.runtime.job.result import MANAGER_URL_ENV, JobResult
from stoker.types import JobId, JobState


def _result(state_dir: Path, store: str, manager: str | None = None) -> JobResult:
    return JobResult(
        job_id=JobId("orders"),
        state=JobState.FINISHED,
        attempt=1,
        epochs=4,
        rows=10,
        last_epoch=3,
        state_dir=state_dir,
        store_url=store,
        manager_url=manager,
    )


def test_under_a_manager_the_command_names_the_manager(tmp_path: Path) -> None:
    r = _result(tmp_path / "jobs" / "orders", "sqlite:////srv/store.db", "http://127.0.0.1:8081")
    assert r.command("epochs") == "stoker epochs orders --server http://127.0.0.1:8081"


def test_alone_the_command_names_the_state_folder_or_the_store(tmp_path: Path) -> None:
    folder = tmp_path / "my state"
    assert _result(folder, f"sqlite:///{folder / 'store.db'}").command("status") == (
        f"stoker status orders --state-dir '{folder}'"
    )
    assert _result(folder, "sqlite:////elsewhere/s.db").command("status") == (
        "stoker status orders --store sqlite:////elsewhere/s.db"
    )
    # A password is never printed.
    pg = _result(folder, "postgresql://u:secret@db/stoker").command("status")
    assert pg == "stoker status orders --store ..."


def test_a_driver_a_manager_started_knows_it_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MANAGER_URL_ENV, "http://10.0.0.5:8081")
    r = JobResult(JobId("orders"), JobState.FINISHED, 1, 0, 0, None, tmp_path, "sqlite:///x")
    assert r.command("epochs") == "stoker epochs orders --server http://10.0.0.5:8081"
