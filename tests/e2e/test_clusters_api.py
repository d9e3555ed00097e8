"""Session clusters through a real ``stoker server``: REST and the CLI, real Spark standalone
JVMs (one master, workers of 512m on 127.0.0.2, .3), real process checks through /proc.

One cluster is started for the module and changed step by step, so the tests depend on the
file's order: start, look, refuse, add a worker, remove it gracefully, the same through the
web UI's Clusters page (Debian's chromium driven by Playwright), stop (no JVM left).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stoker import procs
from tests.support import REPO, file_sink_ids, stoker_cmd, wait_for
from tests.support.manager import Manager, stop_all

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

TOKEN = "cluster-t0ken"
READ_TOKEN = "cluster-read-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NAME = "shared"
SLOW = 400.0  # JVMs starting on a loaded 2-core machine
CHROMIUM = shutil.which("chromium")


APP = """\
import stoker
from stoker import Pipeline, sinks, sources


def main():
    numbers = Pipeline("numbers").source(
        sources.generator(total=30, max_rows_per_epoch=10, partitions=2)
    )
    stoker.run(numbers.sink(sinks.files({out!r})))
"""


@dataclass
class World:
    manager: Manager
    state: Path
    root: Path

    @property
    def url(self) -> str:
        return self.manager.url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("clusters")
    m = Manager(
        "clusters",
        f"sqlite:///{root / 'store.db'}",
        root / "state",
        [root],
        root / "manager.log",
        token=TOKEN,
        read_token=READ_TOKEN,
    )
    try:
        m.wait_up()
        yield World(m, root / "state", root)
    finally:
        # Whatever a failed test left: the cluster's JVMs are the manager's children.
        stop_all([m])


def stoker(*args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_TOKEN")}
    if token is not None:
        env["STOKER_TOKEN"] = token
    return subprocess.run(
        stoker_cmd(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=SLOW
    )


def cluster(w: World, name: str = NAME) -> dict[str, Any]:
    r = w.manager.http.get(f"/v1/clusters/{name}", headers=AUTH)
    assert r.status_code == 200, r.text
    return dict(r.json())


def alive(p: dict[str, Any]) -> bool:
    """The recorded process still runs (same pid and kernel start time)."""
    stat = procs.stat(int(p["pid"]))
    return stat is not None and stat.state not in ("Z", "X") and stat.started == p["pid_started"]


def alive_workers(view: dict[str, Any]) -> list[str]:
    status = view["status"] or {}
    return sorted(w["host"] for w in status.get("workers", []) if w["state"] == "ALIVE")


def spark_jvms(m: Manager) -> list[str]:
    """The Spark daemon JVMs (master, workers) the manager started, as their argv."""
    daemons = ("deploy.master.Master", "deploy.worker.Worker")
    found = [" ".join(p.argv) for p in m.driver_procs()]
    return [argv for argv in found if any(d in argv for d in daemons)]


def test_start_answers_once_the_workers_are_alive(world: World) -> None:
    p = stoker(
        "cluster", "start", "--name", NAME, "--workers", "1", "--memory", "512m",
        "--server", world.manager.url,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr + world.manager.log_tail()
    view = cluster(world)
    assert p.stdout == (
        f"cluster {NAME}: RUNNING at {view['master_url']} (web {view['web_url']}), 1 workers\n"
    )
    assert (view["kind"], view["state"], view["owner_app"], view["workers"]) == (
        "session",
        "RUNNING",
        None,
        1,
    )
    assert view["spec"] == {
        "cluster": "standalone:workers=1,cores=1,memory=512m",
        "workers": 1,
        "cores": 1,
        "memory": "512m",
    }
    assert [(x["role"], x["address"]) for x in view["processes"]] == [
        ("master", "127.0.0.1"),
        ("worker", "127.0.0.2"),
    ]
    assert all(alive(x) for x in view["processes"])
    assert alive_workers(view) == ["127.0.0.2"]
    assert view["used_by"] == []
    assert len(spark_jvms(world.manager)) == 2
    listed = world.manager.http.get("/v1/clusters", headers={"X-Stoker-Token": READ_TOKEN})
    assert [(c["name"], c["state"]) for c in listed.json()] == [(NAME, "RUNNING")]
    p = stoker("cluster", "list", "--server", world.manager.url)
    assert p.returncode == 0 and p.stdout.split()[:3] == [NAME, "session", "RUNNING"], p


def test_bad_requests_change_nothing(world: World) -> None:
    http = world.manager.http
    for body, status, field in (
        ({"name": NAME, "workers": 1, "memory": "512m"}, 409, None),
        ({"workers": 0}, 422, "workers"),
        ({"memory": "lots"}, 422, "memory"),
        ({"memory": "100000g", "workers": 1}, 422, "memory"),
        ({"name": "app-x"}, 422, "name"),
        ({"name": "local"}, 422, "name"),
    ):
        r = http.post("/v1/clusters", json=body, headers=AUTH)
        assert r.status_code == status, (body, r.text)
        assert r.json().get("field") == field, (body, r.text)
    r = http.post("/v1/clusters", json={"workers": 1}, headers={"X-Stoker-Token": READ_TOKEN})
    assert r.status_code == 403
    r = http.post("/v1/clusters/nosuch/stop", headers=AUTH)
    assert (r.status_code, r.json()["type"], r.json()["cluster"]) == (
        404,
        "ClusterNotFound",
        "nosuch",
    )
    p = stoker("cluster", "stop", "nosuch", "--server", world.manager.url)
    assert (p.returncode, p.stderr) == (3, "stoker: error: cluster 'nosuch' not found\n")
    p = stoker("cluster", "remove-worker", NAME, "127.0.0.9", "--server", world.manager.url)
    assert p.returncode == 2 and "no worker '127.0.0.9'" in p.stderr, p.stderr
    assert [c["name"] for c in http.get("/v1/clusters", headers=AUTH).json()] == [NAME]
    assert cluster(world)["workers"] == 1


def test_add_worker_is_an_operation_a_retry_gets_again(world: World) -> None:
    """Issue 21 item 8: the call answers 202 with an operation at once; the same call again
    with its Idempotency-Key (a client that lost the answer) gets that operation, and one
    worker starts; the operation ends with what the call used to answer."""
    http = world.manager.http
    key = {**AUTH, "Idempotency-Key": "add-worker-1"}
    r = http.post(f"/v1/clusters/{NAME}/workers", json={}, headers=key)
    assert r.status_code == 202, r.text
    op = r.json()
    assert (op["kind"], op["target"], op["state"]) == ("add-worker", NAME, "RUNNING"), op
    assert r.headers["location"] == op["url"] == f"/v1/operations/{op['operation_id']}"
    again = http.post(f"/v1/clusters/{NAME}/workers", json={}, headers=key)
    assert (again.status_code, again.json()["operation_id"]) == (200, op["operation_id"])

    def ended() -> dict[str, Any] | None:
        got = http.get(op["url"], headers={"X-Stoker-Token": READ_TOKEN}).json()
        return None if got["state"] == "RUNNING" else got

    done = wait_for("the add-worker operation to end", ended, SLOW, every=0.5)
    assert done["state"] == "SUCCEEDED", done
    out = done["result"]
    assert (out["worker"]["address"], out["cluster"]["workers"]) == ("127.0.0.3", 2)
    view = cluster(world)
    assert alive_workers(view) == ["127.0.0.2", "127.0.0.3"]
    assert all(alive(x) for x in view["processes"])
    # The key, sent again after the end, still names that operation: no third worker.
    late = http.post(f"/v1/clusters/{NAME}/workers", json={}, headers=key)
    assert (late.status_code, late.json()["state"]) == (200, "SUCCEEDED")
    # The key with another request is refused; nothing starts.
    other = http.post(f"/v1/clusters/{NAME}/workers", json={"cores": 2}, headers=key)
    assert (other.status_code, other.json()["field"]) == (422, "Idempotency-Key"), other.text
    assert cluster(world)["workers"] == 2


def test_an_application_on_the_session_cluster_leaves_it_running(world: World) -> None:
    before = cluster(world)["processes"]
    entry = world.root / "shared_app.py"
    entry.write_text(APP.format(out=str(world.root / "out")))
    p = stoker(
        "run", "--driver", str(entry), "--cluster", NAME, "--server", world.url,
        "-D", "stoker.trigger=200ms",
    )  # fmt: skip
    assert (p.returncode, p.stdout) == (0, "shared_app\n"), p.stderr + world.manager.log_tail()
    assert file_sink_ids(world.root / "out") == Counter(range(30))
    r = world.manager.http.get("/v1/applications/shared_app", headers=AUTH).json()
    assert (r["state"], r["cluster"]) == (
        "FINISHED",
        {
            "spec": NAME,
            "name": NAME,
            "state": "RUNNING",
            "master_url": cluster(world)["master_url"],
            "workers": 2,
        },
    )
    # The session cluster outlives its application, every process as it was.
    view = cluster(world)
    assert view["state"] == "RUNNING" and view["processes"] == before
    assert all(alive(x) for x in before)

    # The master lists the Spark application as completed once its driver has disconnected,
    # which may be a moment after stoker recorded the application FINISHED.
    def completed() -> list[str] | None:
        names = [
            a["name"] for a in ((cluster(world).get("status") or {}).get("completedapps") or [])
        ]
        return names or None

    assert wait_for("the master to list the ended application", completed, 60, every=0.5) == [
        "stoker:shared_app"
    ]
    assert view["used_by"] == []


def test_remove_worker_gracefully(world: World) -> None:
    gone = next(x for x in cluster(world)["processes"] if x["address"] == "127.0.0.3")
    p = stoker(
        "cluster", "remove-worker", NAME, "127.0.0.3", "--graceful", "--server", world.manager.url
    )
    assert p.returncode == 0, p.stderr + world.manager.log_tail()
    assert (
        p.stdout
        == f"cluster {NAME}: worker 127.0.0.3 decommissioned and stopped (1 workers left)\n"
    )
    assert not alive(gone)
    view = cluster(world)
    assert [x["address"] for x in view["processes"]] == ["127.0.0.1", "127.0.0.2"]
    assert alive_workers(view) == ["127.0.0.2"]


def _shows(w: World, page: Any, box: Any, selector: str, state: str = "visible") -> None:
    """Wait until ``selector`` in the cluster's section is ``state``; a failure says what the
    page, its last message and the manager's log showed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        box.locator(selector).wait_for(state=state)
    except PlaywrightTimeout:
        raise AssertionError(
            f"{selector} never {state}; message: {page.locator('#toast').text_content()!r}\n"
            f"section: {box.inner_html()}\n{w.manager.log_tail()}"
        ) from None


@pytest.mark.browser
@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
def test_clusters_page_adds_and_removes_a_worker(world: World) -> None:
    from playwright.sync_api import sync_playwright

    section = f'section[aria-label="Cluster {NAME}"]'
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            # The read-only token sees the cluster, its workers and what runs on it, and no
            # action.
            ctx = browser.new_context()
            ctx.set_default_timeout(SLOW * 1000)
            ctx.add_init_script(f"sessionStorage.setItem('stoker-token', {READ_TOKEN!r});")
            page = ctx.new_page()
            page.goto(f"{world.url}/ui/clusters")
            page.locator(f'{section} tr[data-worker="worker-1"] .s-ALIVE').wait_for()
            assert page.locator(f"{section} button").count() == 0
            assert page.get_by_role("button", name=f"Add a worker to {NAME}").count() == 0
            ctx.close()

            ctx = browser.new_context()
            ctx.set_default_timeout(SLOW * 1000)
            ctx.add_init_script(f"sessionStorage.setItem('stoker-token', {TOKEN!r});")
            page = ctx.new_page()
            page.goto(f"{world.url}/ui/clusters")
            box = page.locator(section)
            box.locator('tr[data-worker="worker-1"] .s-ALIVE').wait_for()
            assert box.locator("tr[data-worker]").count() == 1
            assert box.locator(".master-error").count() == 0
            # What ran on it: the master's ended application, linked to stoker's; no job runs.
            done = box.locator("table.apps tbody tr", has_text="stoker:shared_app")
            assert "FINISHED" in (done.text_content() or "")
            assert done.locator('a[href="/ui/applications/shared_app"]').count() == 1
            assert "No running job" in (box.locator("table.jobs").text_content() or "")

            # Add: a worker JVM on the next loopback address (past 127.0.0.3, which the master
            # still lists as the worker removed before), its row once the master lists it ALIVE.
            page.get_by_role("button", name=f"Add a worker to {NAME}").click()
            _shows(world, page, box, 'tr[data-worker="worker-3"] .s-ALIVE')
            view = cluster(world)
            added = next(x for x in view["processes"] if x["id"] == "worker-3")
            assert added["address"] == "127.0.0.4" and alive(added)
            assert alive_workers(view) == ["127.0.0.2", "127.0.0.4"]
            assert "127.0.0.4" in (box.locator('tr[data-worker="worker-3"]').text_content() or "")
            # With STOKER_SCREENSHOTS set, the page as it is now goes to docs/screenshots/.
            shots = REPO / "docs" / "screenshots" if os.environ.get("STOKER_SCREENSHOTS") else None
            page.screenshot(path=str((shots or world.root) / "clusters.png"), full_page=True)

            # Remove it gracefully: the row goes once the worker has left.
            page.get_by_role("button", name="Remove worker-3").click()
            _shows(world, page, box, 'tr[data-worker="worker-3"]', "detached")
            view = cluster(world)
            assert [x["address"] for x in view["processes"]] == ["127.0.0.1", "127.0.0.2"]
            assert alive_workers(view) == ["127.0.0.2"]
            assert not alive(added)
            assert box.locator("tr[data-worker]").count() == 1
            ctx.close()
        finally:
            browser.close()


def test_stop_leaves_no_jvm(world: World) -> None:
    recorded = cluster(world)["processes"]
    p = stoker("cluster", "stop", NAME, "--server", world.manager.url)
    assert (p.returncode, p.stdout) == (0, f"cluster {NAME}: STOPPED\n"), p.stderr
    assert not [x for x in recorded if alive(x)]
    assert spark_jvms(world.manager) == []
    assert world.manager.http.get("/v1/clusters", headers=AUTH).json() == []
    p = stoker("cluster", "list", "--all", "--json", "--server", world.manager.url)
    assert p.returncode == 0, p.stderr
    assert [(c["name"], c["state"]) for c in map(json.loads, p.stdout.splitlines())] == [
        (NAME, "STOPPED")
    ]
    # A stopped cluster's name can be used again (not started here).
    assert cluster(world)["status"] is None
