"""``stoker run`` of an example or an app as a user runs it, in its own process group: started,
waited on while it runs, killed with its JVM and workers, its log's tail in every failure.
Shared by the tests that run the examples (Spark's ports, the Kafka pipelines)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stoker.store import open_store
from stoker.types import EpochState, job_id
from tests.support.core import JVM_OPTS, wait_for
from tests.support.drivers import kill_group

RUN_TIMEOUT = 420.0  # a cold Spark driver on 2 cores other suites share, then its epochs
SUSPENDED_EXIT = 13  # stoker.errors.EXIT_CODES[JobSuspended]: a graceful stop by SIGTERM
# The CLI's options for a light driver on a shared 2-core machine (not the example's code).
LIGHT = ["-D", "stoker.master=local[2]", "-D", f"spark.driver.extraJavaOptions={JVM_OPTS}"]


def committed(state: Path, job: str) -> int:
    """The committed epochs of ``job`` in the SQLite store of its state folder ``state``."""
    db = state / "store.db"
    if not db.exists():
        return 0
    st = open_store(db)
    try:
        return sum(e.state == EpochState.COMMITTED for e in st.list_epochs(job_id(job), 10_000))
    finally:
        st.close()


def log_tail(log: Path, lines: int = 40) -> str:
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:])


@contextlib.contextmanager
def driver(
    argv: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``stoker run`` as the leader of its own process group (a kill takes its JVM along);
    killed with it if the test fails while it runs."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            kill_group(proc)


def wait_running(
    proc: subprocess.Popen[bytes],
    what: str | Callable[[], str],
    cond: Callable[[], Any],
    log: Path,
    timeout: float = RUN_TIMEOUT,
) -> Any:
    """Poll ``cond`` while the driver runs; fail with its log's tail when it ends first."""

    def said() -> str:
        return f"{what() if callable(what) else what}\n{log_tail(log)}"

    def check() -> Any:
        value = cond()
        if not value and proc.poll() is not None:
            raise AssertionError(f"driver ended (rc {proc.returncode}) waiting for {said()}")
        return value

    return wait_for(said, check, timeout)
