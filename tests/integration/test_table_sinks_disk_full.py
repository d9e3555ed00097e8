"""The table sinks' disk fills up while a job writes (issue 43 item 3): the Delta table, and
the Iceberg warehouse, on a small tmpfs of the test's own, filled to the last byte once the
job has committed an epoch. The run ends on its own (no hang): its attempt fails when a task
cannot write its Parquet file, or its intent, or the commit its log entry. Nothing of an
undecided epoch is in the table, and the files of the failed attempt are gone or invisible.
Once the disk is freed, the same job run again (``--restart``) commits every id once: each
epoch in one commit, no data file outside the log or the snapshots.

Root only (a tmpfs is mounted): CI runs as root; elsewhere the tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.nemesis import SmallDisk, can_mount
from tests.integration import test_delta_sink as d
from tests.integration import test_iceberg_sink as i
from tests.support import wait_for
from tests.support.cli_runs import committed

pytestmark = [pytest.mark.variant, pytest.mark.timeout(1200)]  # the files sink's disk_full: chaos


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    if not can_mount():
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root and must mount a tmpfs for the disk-full tests")
        pytest.skip("mounting a small tmpfs needs root")
    disk = SmallDisk(tmp_path / "disk", size_mb=32)
    try:
        yield disk
    finally:
        disk.close()


def fill(disk: SmallDisk) -> Path:
    """Write a ballast file until the disk has no byte left; the file is kept (freed by the
    test)."""
    ballast = disk.path / ".ballast"
    chunk = b"\0" * (1 << 16)
    with open(ballast, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:  # until ENOSPC
            f.write(chunk)
    return ballast


def run_into_a_full_disk(
    start: object, state: Path, env: dict[str, str], disk: SmallDisk, tmp_path: Path, job: str
) -> None:
    """Run 1 until an epoch is committed, then fill the disk and let it end by itself (any
    exit: a failed attempt); free the disk; run 2 (``--restart``) to the end."""
    assert callable(start)
    log = tmp_path / "driver-1.log"
    proc = start(state, env, log)
    try:
        wait_for(
            lambda: f"a committed epoch\n{d.tail(log)}",
            lambda: committed(state, job) >= 1 or proc.poll() is not None,
            d.RUN,
            0.2,
        )
        assert proc.poll() is None, d.tail(log)
        ballast = fill(disk)
        try:
            rc = proc.wait(timeout=d.RUN)  # the run ends on its own: never a hang
        finally:
            ballast.unlink(missing_ok=True)
        assert rc != 0, f"the run finished with the disk full\n{d.tail(log)}"
        assert "No space left on device" in log.read_text(errors="replace"), d.tail(log)
    finally:
        if proc.poll() is None:
            d.kill_group(proc)
    log = tmp_path / "driver-2.log"
    d.finish(start(state, env, log, "--restart"), log, 0)


def test_a_full_disk_under_a_delta_table(small_disk: SmallDisk, tmp_path: Path) -> None:
    state, out = tmp_path / "state", small_disk.path / "table"
    env = d.dids_env(out, total=3000, per_epoch=200)
    run_into_a_full_disk(d.start_dids, state, env, small_disk, tmp_path, d.JOB)
    d.assert_done(state, out, 3000, tmp_path / "driver-2.log")


def test_a_full_disk_under_an_iceberg_warehouse(small_disk: SmallDisk, tmp_path: Path) -> None:
    """The catalog (SQLite) stays on the test's disk: a catalog that cannot be written is an
    outage the commit waits out (test_iceberg_sink), not the fault here."""
    state, wh = tmp_path / "state", small_disk.path / "warehouse"
    env = i.iids_env(tmp_path, total=3000, per_epoch=200, IIDS_WAREHOUSE=str(wh))
    run_into_a_full_disk(i.start_iids, state, env, small_disk, tmp_path, i.JOB)
    i.assert_done(tmp_path, state, 3000, tmp_path / "driver-2.log", wh=wh)
