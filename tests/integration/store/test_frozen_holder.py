"""A process frozen inside a store transaction does not hold the store's rows for good
(PostgreSQL): the server ends a session idle in a transaction for ``idle_tx_timeout``, which
rolls it back and frees its row locks, and the writer waiting on them goes on.

On SQLite the same fault is the manager's to break (tests/unit/manager/test_lockwatch.py):
nothing on SQLite's side ends a transaction. Here the holder is a real process with a store of
its own, frozen with SIGSTOP while it holds a job's row ``FOR UPDATE``; the writer is this test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from stoker import procs
from stoker.store.postgres import PostgresStore
from stoker.types import JobState, job_id
from tests.support import wait_for

HOLD = """
import os, signal, sys
from stoker.store.postgres import PostgresStore
st = PostgresStore(sys.argv[1], idle_tx_timeout=1.0)
with st._tx() as cur:
    cur.execute("SELECT job_id FROM jobs WHERE job_id = %s FOR UPDATE", ("j",))
    print("held", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    cur.execute("SELECT 1")  # continued: the server ended the session meanwhile
"""


def test_a_frozen_holders_row_locks_are_freed_and_the_waiting_writer_goes_on(
    pg_dsn: str,
) -> None:
    st = PostgresStore(pg_dsn)
    holder: subprocess.Popen[str] | None = None
    try:
        st.create_job(job_id("j"), "j", {"sinks": []}, {})
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, pg_dsn], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        wait_for("the holder stopped", lambda: (procs.stat(holder.pid) or _gone()).state == "T", 30)

        done: list[JobState] = []
        writer = threading.Thread(
            target=lambda: done.append(
                st.set_job_state(job_id("j"), JobState.CANCELED, "test").state
            ),
            daemon=True,
        )
        writer.start()
        wait_for("the writer past the frozen holder's row lock", lambda: done, 120)
        assert done == [JobState.CANCELED]

        os.kill(holder.pid, signal.SIGCONT)
        assert holder.wait(timeout=60) != 0  # its session is gone: it cannot go on
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        st.close()


def _gone() -> procs.ProcStat:
    return procs.ProcStat(0, "X", 0, 0, "")
