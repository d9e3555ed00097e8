"""Server and store text on an operator's terminal (issue 22, low list): shown, never obeyed.
The CLI runs under a real pseudo-terminal; a job's error holds escape sequences that would set
the terminal's title and clear its screen."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from pathlib import Path

from stoker.cli.terminal import clean
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, AttemptState, JobState, job_id
from tests.support import REPO, stoker_cmd

HOSTILE = "boom\x1b]0;pwned\x07\x1b[2J\rspoofed"


def test_control_characters_are_written_as_text() -> None:
    assert clean(HOSTILE) == "boom\\x1b]0;pwned\\x07\\x1b[2J\\x0dspoofed"
    assert clean("tab\there\nnext line") == "tab\there\nnext line"


def _on_a_terminal(argv: list[str]) -> bytes:
    main, sub = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(argv, stdin=sub, stdout=sub, stderr=sub, env=env, cwd=str(REPO))
    os.close(sub)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the other end closed: the command is done
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.wait(timeout=60)
        os.close(main)
    return out


def test_a_jobs_error_with_escape_sequences_reaches_the_terminal_as_text(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    try:
        jid = job_id("hostile")
        store.create_job(jid, "hostile", {"sinks": []}, {})
        store.start_attempt(jid, Owner("h", 1, "x"), 10.0, AttemptNo(0))
        store.finish_attempt(jid, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, HOSTILE)
    finally:
        store.close()
    out = _on_a_terminal(stoker_cmd("status", "hostile", "--store", url))
    assert b"hostile" in out, out
    assert b"\x1b" not in out and b"\x07" not in out, out
    assert b"\\x1b]0;pwned" in out, out
