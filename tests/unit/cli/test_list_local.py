"""``stoker list`` of local runs (a newcomer walk: it refused without --server or --store, and
each local job has a store of its own under ./.stoker/JOB): the jobs of every store under
./.stoker, or under --state-dir (a job's folder, or a folder of them); nothing is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from stoker.cli import main
from stoker.store import open_store
from stoker.types import job_id


def _job(folder: Path, name: str) -> None:
    st = open_store(folder / "store.db")
    try:
        st.create_job(job_id(name), name, {"sinks": []}, {})
    finally:
        st.close()


def _list(cwd: Path, *argv: str) -> tuple[int, str, str]:
    here = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(main, ["list", *argv], env={"STOKER_SERVER": "", "STOKER_STORE": ""})
    finally:
        os.chdir(here)
    return r.exit_code, r.stdout, r.stderr


def test_the_local_runs_under_dot_stoker_are_listed(tmp_path: Path) -> None:
    _job(tmp_path / ".stoker" / "a", "a")
    _job(tmp_path / ".stoker" / "b", "b")
    code, out, err = _list(tmp_path)
    assert code == 0, err
    assert [line.split()[:2] for line in out.splitlines()] == [["a", "CREATED"], ["b", "CREATED"]]


@pytest.mark.parametrize("where", ["job", "parent"])
def test_a_state_dir_is_a_jobs_folder_or_a_folder_of_them(tmp_path: Path, where: str) -> None:
    _job(tmp_path / "state", "orders")
    given = tmp_path / "state" if where == "job" else tmp_path
    code, out, err = _list(tmp_path, "--state-dir", str(given))
    assert code == 0, err
    assert out.split()[:2] == ["orders", "CREATED"]


def test_no_local_run_says_where_it_looked_and_creates_nothing(tmp_path: Path) -> None:
    code, out, err = _list(tmp_path)
    assert code == 2 and out == ""
    assert "no local job under .stoker" in err and "--state-dir" in err
    assert list(tmp_path.iterdir()) == []
