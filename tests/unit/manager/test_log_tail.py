"""A driver's log read from the manager (issue 22, items 5 and 6): from its end, at most 1 MiB
unless asked, never more than 16 MiB, and from a line start: a tail that began inside a line
showed a secret's value without the key that has it masked. A real SQLite store and log file."""

from __future__ import annotations

from pathlib import Path

from stoker.manager.logs import LOG_TAIL_DEFAULT, attempt_log
from stoker.redact import redact_text
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, job_id


def test_a_log_is_read_from_its_end_from_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "j" / "attempt-1.log"  # where a manager writes it
    log.parent.mkdir(parents=True)
    line = b"x" * 99 + b"\n"
    with open(log, "wb") as fh:
        for _ in range(30_000):  # about 3 MB
            fh.write(line)
        fh.write(b"conf: spark.jdbc.password=hunter2\n")
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        jid = job_id("j")
        store.create_job(jid, "j", {}, {})
        store.start_attempt(jid, Owner("h", 1, "1"), 10.0, AttemptNo(0), log_path=str(log))
        default = attempt_log(store, "j", 1)
        assert len(default) <= LOG_TAIL_DEFAULT and default.startswith("x" * 99 + "\n")
        assert default.endswith("password=hunter2\n")
        # 20 bytes end inside the secret's line: that line is left out, not shown cut.
        assert attempt_log(store, "j", 1, tail=20) == ""
        assert redact_text(attempt_log(store, "j", 1, tail=40)) == (
            "conf: spark.jdbc.password=***\n"
        )
    finally:
        store.close()
