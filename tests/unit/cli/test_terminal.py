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


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """Issue 23 item 9: ``stoker list | head -1`` ended in a BrokenPipeError traceback and
    exit 1. The reader here reads one line and closes the pipe while the list is written."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    try:
        store.create_jobs([(job_id(f"j{i:05d}"), f"j{i}", {"sinks": []}, {}) for i in range(5000)])
    finally:
        store.close()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        stoker_cmd("list", "--store", url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(REPO),
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert first.startswith(b"j0") and b"Traceback" not in err and b"BrokenPipe" not in err, err
