"""Issue 23 item 11: the command a finished run prints to read its job names what is true where
the job ran: the job manager that started it, else its state folder, else its store."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from stoker.runtime.job.result import MANAGER_URL_ENV, JobResult, program
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


@pytest.fixture(autouse=True)
def stoker_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stoker`` on PATH (this interpreter's environment's scripts first), as in an activated
    venv; the test of a venv that is not activated takes it off."""
    bin_dir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))


def test_a_venv_not_activated_gets_the_scripts_path_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "stoker").is_file()  # the README's .venv/bin/stoker
    monkeypatch.setenv("PATH", str(tmp_path))  # no stoker along PATH
    monkeypatch.chdir(bin_dir.parent.parent)
    monkeypatch.setattr(sys, "argv", [f"{bin_dir.parent.name}/bin/stoker", "run", "x.py"])
    assert program() == f"{bin_dir.parent.name}/bin/stoker"
    r = _result(tmp_path / "s", f"sqlite:///{tmp_path / 's' / 'store.db'}")
    assert r.command("epochs").startswith(f"{bin_dir.parent.name}/bin/stoker epochs orders ")
    # run as `python app.py`: this interpreter's own script, where it is
    monkeypatch.setattr(sys, "argv", ["app.py"])
    assert program() == str(bin_dir / "stoker")


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
