"""sources.socket through ``stoker run``, as a user runs a socket job: a TCP server of the
test's sends ids as lines; the driver is killed with its whole group (SIGKILLs at moments the
test does not choose once the lines are in the source's log, and an injected crash right after
the decision of the epoch that holds a round's lines, so that the next attempt replays it from
the log), runs again with the same command, and in the end every id the source received is in
the sink exactly once.

A socket has no acknowledgement: a line the server sent that had not reached the source's log
when the driver died was never received. The test therefore knows what was received by
reading the log (and the sink), and sends again what was not, as a sender would after a
reconnect; everything it sent ends up in the sink once. Spark's own socket source, under the
same kill, failed for good on its restart ("Offsets committed out of order").
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stoker.store import open_store
from stoker.types import job_id
from tests.support import kill_group, stoker_cmd
from tests.support.cli_runs import LIGHT, SUSPENDED_EXIT, driver, log_tail, wait_running
from tests.support.core import wait_for
from tests.support.lineserver import LineServer
from tests.support.sinks import file_sink_ids

pytestmark = pytest.mark.timeout(900)

APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("lines")
p.source(sources.socket("127.0.0.1", {port}))
p.transform(lambda df: df.selectExpr("CAST(value AS LONG) AS id"))
p.sink(sinks.files({out!r}))
stoker.run(p, trigger="300ms")
"""


def logged(state: Path) -> set[int]:
    """The ids in the source's log (received; not yet deleted by a commit)."""
    out: set[int] = set()
    for f in state.glob("sources/*.socket/*.jsonl"):
        if not f.name.startswith("."):
            out.update(int(json.loads(line)[0]) for line in f.read_text().splitlines())
    return out


def next_epoch(state: Path) -> int:
    """The number the job's next new epoch gets: one past the newest it recorded."""
    db = state / "store.db"
    if not db.exists():
        return 0
    st = open_store(db)
    try:
        return 1 + max((e.epoch for e in st.list_epochs(job_id("lines"), 10_000)), default=-1)
    finally:
        st.close()


@dataclass
class Job:
    """The job's run, round after round, and what the test sent it."""

    srv: LineServer
    tmp: Path
    sent: list[int] = field(default_factory=list)
    todo: list[int] = field(default_factory=list)  # sent, never received: sent again

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    @property
    def state(self) -> Path:
        return self.tmp / ".stoker" / "lines"

    @property
    def log(self) -> Path:
        return self.tmp / "run.log"

    def in_sink(self) -> set[int]:
        return set(file_sink_ids(self.out))

    def round(self, fault: str | None) -> None:
        """One driver: connects, gets 40 new ids (and what was never received), then
        ``kill`` (SIGKILL once they are in the log), ``decide`` (an injected crash right
        after the next new epoch's decision) or None (runs until the sink has every id, then
        SIGTERM)."""
        env = {**os.environ}
        if fault == "decide":
            # A restart runs no empty epoch first: the next new epoch is the round's lines.
            env["STOKER_FAULT"] = f"after_decide:{next_epoch(self.state)}"
        argv = stoker_cmd("run", *LIGHT, str(self.tmp / "app.py"))
        seen = len(self.srv.clients)
        log = self.log
        with driver(argv, self.tmp, log, env=env) as proc:
            wait_running(proc, "the connection", lambda: len(self.srv.clients) > seen, log)
            new = list(range(len(self.sent), len(self.sent) + 40))
            batch = self.todo + new
            self.srv.send_ids(batch)
            self.sent += new

            def received() -> bool:
                have = logged(self.state) | self.in_sink()
                return set(batch) <= have or proc.poll() is not None

            wait_for(lambda: f"round {fault}: the lines logged\n{log_tail(log)}", received, 420)
            if fault == "kill":
                kill_group(proc)
            elif fault == "decide":
                assert proc.wait(300) == -signal.SIGKILL, log_tail(log)
                assert "injected crash at after_decide" in log.read_text(), log_tail(log)
            self.todo = sorted(set(batch) - logged(self.state) - self.in_sink())
            if fault is None:
                wait_running(
                    proc,
                    lambda: f"every id in the sink (has {sorted(self.in_sink())})",
                    lambda: set(self.sent) <= self.in_sink(),
                    log,
                )
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(300) == SUSPENDED_EXIT, log_tail(log)


def test_every_line_received_is_in_the_sink_once_across_kills(tmp_path: Path) -> None:
    srv = LineServer()
    job = Job(srv, tmp_path)
    (tmp_path / "app.py").write_text(APP.format(port=srv.port, out=str(job.out)))
    try:
        # A SIGKILL once the round's lines are in the log (wherever the epoch protocol is
        # then), an injected crash right after the decision of the epoch with the round's
        # lines, another SIGKILL, then a run to the end.
        for fault in ["kill", "decide", "kill", None]:
            job.round(fault)
        assert job.todo == []
        got = file_sink_ids(job.out)
        assert Counter(job.sent) == got, {i: n for i, n in got.items() if n != 1}
        assert sorted(got) == list(range(len(job.sent)))
    finally:
        srv.close()
