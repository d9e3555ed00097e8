"""A driver's log read from the manager (issue 22, items 5 and 6): from its end, at most 1 MiB
unless asked, never more than 16 MiB, and from a line start: a tail that began inside a line
showed a secret's value without the key that has it masked. A real SQLite store and log file."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        # A tail counts lines, as the application's log does (one unit for both commands).
        assert redact_text(attempt_log(store, "j", 1, tail=1)) == (
            "conf: spark.jdbc.password=***\n"
        )
        two = attempt_log(store, "j", 1, tail=2)
        assert two == "x" * 99 + "\nconf: spark.jdbc.password=hunter2\n"
    finally:
        store.close()


def test_a_tail_of_many_lines_stops_at_the_cap_from_a_line_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many lines are asked for, no more than LOG_TAIL_MAX bytes are read, and the
    answer starts at a line start (issue 22 item 5)."""
    from stoker.manager import logs

    monkeypatch.setattr(logs, "LOG_TAIL_MAX", 1000)
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i:05d} secret=part\n" for i in range(1000)))
    got = logs.tail_lines(log, 1_000_000)
    assert 0 < len(got.encode()) <= 1000 and got.startswith("line ")
    assert got.endswith("line 00999 secret=part\n")
    whole_lines = got.splitlines()
    assert all(ln.startswith("line ") and ln.endswith("secret=part") for ln in whole_lines)
