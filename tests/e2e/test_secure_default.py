"""Secure by default (issue 22 item 1), on real ``stoker server`` processes: a fresh server
makes a token and refuses calls without it; running open takes a flag that says so and only
on loopback; a rebound Host gets no answer; a write from another origin, or with a body that
is not JSON, is refused; and a real Chromium page of another origin cannot drive an open
manager. No Spark: the managers are ``--api-only`` where a job is needed (never lead, start no
driver) and the jobs are records made in the store.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stoker.store import open_store
from stoker.types import JobState, job_id
from tests.support import REPO, free_port, stoker_cmd, wait_for
from tests.support.manager import MANAGER_START

pytestmark = pytest.mark.timeout(300)

SPEC: dict[str, Any] = {
    "name": "victim",
    "sources": ["generator(rows_per_second=10)"],
    "sinks": ["files('/out')"],
    "config": {},
    "events": [],
}


class Server:
    """One ``stoker server`` started as a user would, in ``cwd``, with ``args``."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.cwd = cwd
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = cwd / f"server-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                stoker_cmd("server", "--port", str(self.port), *args),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def up() -> bool:
            assert self.proc.poll() is None, self.text()
            try:
                return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(lambda: f"the server to come up\n{self.text()}", up, MANAGER_START, every=0.2)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for s in made:
        s.stop()


def _cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    return subprocess.run(
        stoker_cmd(*args),
        cwd=cwd,
        env={**base, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_fresh_server_makes_a_token_and_every_call_needs_it(
    tmp_path: Path, servers: list[Server]
) -> None:
    """No --token: the server writes one into its state folder (0600), says where, and
    refuses every call without it but the probes; the CLI in the same folder finds it for a
    loopback URL, elsewhere it is refused (exit 11) unless STOKER_TOKEN_FILE names the file;
    a restart keeps the token."""
    s = Server(tmp_path)
    servers.append(s)
    path = tmp_path / ".stoker-server" / "token"
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text().strip()
    assert len(token) >= 32
    assert str(path) in s.text() and "made now" in s.text()
    assert token not in s.text()

    assert httpx.get(f"{s.url}/v1/jobs", timeout=10).status_code == 401
    assert httpx.post(f"{s.url}/v1/jobs/x/cancel", timeout=10).status_code == 401
    assert httpx.get(f"{s.url}/healthz", timeout=10).status_code == 200
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{s.url}/v1/jobs", headers=auth, timeout=10).status_code == 200

    here = _cli(tmp_path, "list", "--server", s.url)
    assert here.returncode == 0, here.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = _cli(elsewhere, "list", "--server", s.url)
    assert refused.returncode == 11, refused.stderr
    assert "STOKER_TOKEN_FILE" in refused.stderr
    named = _cli(elsewhere, "list", "--server", s.url, env={"STOKER_TOKEN_FILE": str(path)})
    assert named.returncode == 0, named.stderr

    s.stop()
    again = Server(tmp_path)
    servers.append(again)
    assert path.read_text().strip() == token
    assert "as before" in again.text()
    assert httpx.get(f"{again.url}/v1/jobs", headers=auth, timeout=10).status_code == 200


def test_running_open_takes_a_flag_that_says_so_and_loopback_only(tmp_path: Path) -> None:
    for args, words in (
        (("--insecure-no-token", "--host", "0.0.0.0"), "loopback only"),
        (("--insecure-no-token", "--token", "t0k"), "contradicts"),
    ):
        state = tmp_path / "state"
        done = _cli(tmp_path, "server", "--state-dir", str(state), "--port", "0", *args)
        assert done.returncode == 2, done.stderr
        assert "--insecure-no-token" in done.stderr and words in done.stderr, done.stderr
        assert not state.exists()


def _raw(port: int, path: str, host: str) -> tuple[int, str]:
    """GET ``path`` with ``Host: host`` as written, on a connection of its own."""
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_a_rebound_host_name_gets_no_answer(tmp_path: Path, servers: list[Server]) -> None:
    """DNS rebinding: a page's own name now resolves to 127.0.0.1, and its requests carry
    that name as Host. Refused (400) before the token is even looked at, open or not; the
    probes answer; --allow-host adds a name."""
    open_ = Server(tmp_path, "--insecure-no-token", "--state-dir", str(tmp_path / "a"))
    servers.append(open_)
    code, body = _raw(open_.port, "/v1/jobs", "rebind.attacker.example")
    assert code == 400 and "--allow-host" in body, body
    code, _ = _raw(open_.port, "/healthz", "rebind.attacker.example")
    assert code == 200
    code, _ = _raw(open_.port, "/v1/jobs", f"localhost:{open_.port}")
    assert code == 200

    allowed = Server(
        tmp_path,
        "--insecure-no-token",
        "--allow-host",
        "stoker.internal",
        "--state-dir",
        str(tmp_path / "b"),
    )
    servers.append(allowed)
    code, _ = _raw(allowed.port, "/v1/jobs", "stoker.internal:80")
    assert code == 200
    code, _ = _raw(allowed.port, "/v1/jobs", "rebind.attacker.example")
    assert code == 400


def _victim(state_dir: Path) -> str:
    """A RUNNING job's record in the store of a manager that never leads."""
    st = open_store(f"sqlite:///{state_dir / 'store.db'}")
    try:
        jid = job_id("victim")
        st.create_job(jid, "victim", SPEC, {})
        st.set_job_state(jid, JobState.RUNNING)
    finally:
        st.close()
    return "victim"


def _untouched(state_dir: Path) -> None:
    st = open_store(f"sqlite:///{state_dir / 'store.db'}")
    try:
        job = st.get_job(job_id("victim"))
        assert job.state == JobState.RUNNING and job.cancel_requested_at is None
        assert st.list_controls(job_id("victim")) == []
    finally:
        st.close()


def test_writes_from_another_origin_or_with_a_body_that_is_not_json_are_refused(
    tmp_path: Path, servers: list[Server]
) -> None:
    """On a manager run open: what a browser's simple requests look like (a form post, a
    ``text/plain`` body, a foreign ``Origin``) is refused before it reaches a route (403,
    415); the same call as the CLI or the manager's own page sends it goes through."""
    state = tmp_path / "state"
    s = Server(tmp_path, "--insecure-no-token", "--api-only", "--state-dir", str(state))
    servers.append(s)
    job = _victim(state)
    pause = '{"kind": "pause"}'
    evil = {"Origin": "http://evil.example"}
    r = httpx.post(f"{s.url}/v1/jobs/{job}/cancel", headers=evil, timeout=10)
    assert r.status_code == 403 and r.json()["type"] == "CrossOrigin", r.text
    r = httpx.post(
        f"{s.url}/v1/jobs/{job}/control",
        content=pause,
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert r.status_code == 415 and "application/json" in r.json()["error"], r.text
    r = httpx.post(f"{s.url}/v1/jobs/{job}/control", data={"kind": "pause"}, timeout=10)
    assert r.status_code == 415, r.text
    r = httpx.post(
        f"{s.url}/v1/jobs/{job}/savepoints", headers={"Sec-Fetch-Site": "cross-site"}, timeout=10
    )
    assert r.status_code == 403, r.text
    _untouched(state)

    same = {"Origin": s.url, "Content-Type": "application/json"}
    r = httpx.post(f"{s.url}/v1/jobs/{job}/control", content=pause, headers=same, timeout=10)
    assert r.status_code == 202, r.text
    r = httpx.post(f"{s.url}/v1/jobs/{job}/cancel", timeout=10)  # the CLI's: no Origin
    assert r.status_code == 202, r.text


CHROMIUM = shutil.which("chromium")

PAGE = """<!doctype html>
<html><body>
<form id="f" method="POST" action="{url}/v1/jobs/victim/cancel" target="sink"></form>
<iframe name="sink"></iframe>
<script>
const url = {url!r};
Promise.allSettled([
  fetch(url + "/v1/jobs/victim/control", {{method: "POST", mode: "no-cors",
    headers: {{"Content-Type": "text/plain"}}, body: '{{"kind": "pause"}}'}}),
  fetch(url + "/v1/jobs/victim/savepoints", {{method: "POST", mode: "no-cors"}}),
  fetch(url + "/v1/jobs/victim/cancel", {{method: "POST", mode: "no-cors"}}),
]).then(() => {{
  document.getElementById("f").submit();
  setTimeout(() => {{ document.title = "done"; }}, 1500);
}});
</script>
</body></html>
"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_a_page_of_another_origin_cannot_drive_an_open_manager(
    tmp_path: Path, servers: list[Server]
) -> None:
    """A real Chromium visits a page on another origin (another port) that tries what the
    review did: a text/plain pause, a body-less savepoint and cancel (no-cors fetches), and a
    plain form post of a cancel. The manager runs without a token; the job is untouched."""
    from playwright.sync_api import sync_playwright

    state = tmp_path / "state"
    s = Server(tmp_path, "--insecure-no-token", "--api-only", "--state-dir", str(state))
    servers.append(s)
    _victim(state)
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(PAGE.format(url=s.url))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(site), **kw)

        def log_message(self, *a: Any) -> None:
            pass

    page_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=page_server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(f"http://localhost:{page_server.server_address[1]}/index.html")
                page.wait_for_function("document.title === 'done'", timeout=60_000)
            finally:
                browser.close()
    finally:
        page_server.shutdown()
    _untouched(state)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_docs_page_renders_under_its_content_security_policy(
    tmp_path: Path, servers: list[Server]
) -> None:
    """/docs had no CSP and kept a typed token in localStorage (issue 22, low). Now only its
    own inline script runs (by hash), nothing may frame it, and Swagger UI still renders in a
    real Chromium with no CSP violation."""
    from playwright.sync_api import sync_playwright

    s = Server(tmp_path, "--insecure-no-token", "--api-only", "--state-dir", str(tmp_path / "st"))
    servers.append(s)
    r = httpx.get(f"{s.url}/docs", timeout=10)
    csp = r.headers["content-security-policy"]
    assert (
        "frame-ancestors 'none'" in csp
        and "'sha256-" in csp
        and "unsafe-inline" not in (csp.split("script-src", 1)[1].split(";", 1)[0])
    ), csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "persistAuthorization" in r.text and '"persistAuthorization": false' in r.text
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            problems: list[str] = []
            page.on(
                "console",
                lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
            )
            page.goto(f"{s.url}/docs")
            page.wait_for_selector("text=stoker job manager", timeout=60_000)
            page.wait_for_selector(".opblock", timeout=60_000)  # the operations are listed
            assert problems == [], problems
        finally:
            browser.close()
