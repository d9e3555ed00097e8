"""A manager's state folder from an older install (0755, its store and logs 0644) is made its
user's alone at start, and a token file others can read is refused naming the file and the
chmod to run (issue 39 item 9). Real ``stoker server`` processes, no Spark."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support import REPO, free_port, stoker_cmd, wait_for
from tests.support.manager import MANAGER_START, one_manager

pytestmark = pytest.mark.timeout(300)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def _older_install(state: Path) -> None:
    """What a stoker before issue 22 item 7 left: every folder 0755, every file 0644."""
    (state / "logs").mkdir(parents=True)
    (state / "store.db").write_bytes(b"")
    (state / "logs" / "j.log").write_text("a log line\n")
    for p in (state, state / "logs"):
        os.chmod(p, 0o755)
    for p in (state / "store.db", state / "logs" / "j.log"):
        os.chmod(p, 0o644)


def test_an_older_installs_state_folder_is_made_private_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _older_install(state)
    (state / "store.db").unlink()  # the manager makes its store anew here
    with one_manager(tmp_path, "m") as m:
        assert m.health() is not None
        assert _mode(state) == 0o700, oct(_mode(state))
        assert _mode(state / "logs") == 0o700, oct(_mode(state / "logs"))
        for p in state.iterdir():  # the store the manager made, too
            assert _mode(p) & 0o077 == 0, (p, oct(_mode(p)))
        assert "was 0755" in m.log_tail() and "made 0700" in m.log_tail(), m.log_tail()
        assert httpx.get(f"{m.url}/v1/jobs", timeout=10).status_code == 200


def test_a_token_file_others_can_read_is_refused_naming_the_chmod(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    token = state / "token"
    token.write_text("a-token-someone-else-may-have-read\n")
    os.chmod(token, 0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    done = subprocess.run(
        stoker_cmd("server", "--state-dir", str(state), "--port", "0"),
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert str(token) in done.stderr and f"chmod 600 {token}" in done.stderr, done.stderr
    assert "0644" in done.stderr and "a-token-someone" not in done.stderr, done.stderr
    assert _mode(token) == 0o644  # refused, not changed behind the operator's back
    # After the chmod the operator was told to run, the manager starts with that token.
    os.chmod(token, 0o600)
    port = free_port()
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(
            stoker_cmd("server", "--state-dir", str(state), "--port", str(port)),
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(REPO)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}/v1/jobs"
        auth = {"Authorization": "Bearer a-token-someone-else-may-have-read"}

        def answers() -> int | None:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                return httpx.get(url, headers=auth, timeout=5).status_code
            except httpx.HTTPError:
                return None

        assert wait_for("the server to answer", answers, MANAGER_START) == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
