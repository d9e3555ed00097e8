"""The web UI (issue 12) in real headless Chromium against a real ``stoker server``.

One manager (a leader, with a full and a read-only token) runs one live job on local Spark
(an endless generator into a files sink); a few ended jobs are written into its store for the
table. One Chromium (Debian's, driven by Playwright) for the module, a fresh browser context
(its own sessionStorage, so its own token) per test. Screenshots go to docs/screenshots/ with
``STOKER_SCREENSHOTS=1``, else to the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stoker.store import open_store
from stoker.types import JobState, job_id
from tests.support import JVM_OPTS, REPO, wait_for
from tests.support.manager import Manager, stop_all

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
    ),
]

TOKEN = "ui-full-t0ken"
READ_TOKEN = "ui-read-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB = "uilive"
SPARK = 420.0  # a cold Spark driver on a loaded 2-core machine
STEP = 180.0  # an event to be applied and committed, an epoch to pass, a page to update
APP = """\
import time

from stoker import Pipeline, sinks, sources

pipeline = Pipeline({job!r}, config={{"delay_s": 0.0, "tag": "a"}})
pipeline.source(sources.generator(rows_per_second=20))


def slow(df, ctx):
    # The config can hold an epoch between APPLIED and COMMITTED for the timeline to show.
    if ctx.config["delay_s"]:
        time.sleep(ctx.config["delay_s"])
    return df


pipeline.transform(slow)
pipeline.sink(sinks.files({out!r}))
"""
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "500ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
    # The driver's Spark UI, on a port the OS picks: the job page links to it.
    "spark.ui.enabled": "true",
    "spark.ui.port": "0",
}
# Ended jobs beside the live one, written into the store before the manager starts.
ENDED = {"orders-backfill": JobState.CANCELED, "clicks-v1": JobState.FAILED}


@dataclass
class Server:
    manager: Manager
    shots: Path

    @property
    def url(self) -> str:
        return self.manager.url

    def job(self) -> dict[str, Any]:
        return dict(self.manager.http.get(f"/v1/jobs/{JOB}", headers=AUTH).json())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("webui")
    allowed = root / "apps"
    allowed.mkdir()
    app = allowed / "uilive.py"
    app.write_text(APP.format(job=JOB, out=str(root / "out")))
    store_url = f"sqlite:///{root / 'store.db'}"
    _ended_jobs(store_url)  # before the manager: it never sees them CREATED
    m = Manager(
        "ui",
        store_url,
        root / "state",
        [allowed],
        root / "server.log",
        token=TOKEN,
        read_token=READ_TOKEN,
    )
    shots = REPO / "docs" / "screenshots" if os.environ.get("STOKER_SCREENSHOTS") else root
    shots.mkdir(parents=True, exist_ok=True)
    try:
        m.wait_up()
        r = m.http.post("/v1/jobs", headers=AUTH, json={"entrypoint": str(app), "conf": CONF})
        assert r.status_code == 201, r.text
        s = Server(m, shots)

        def committed() -> bool:
            job = s.job()
            assert job["state"] not in ("FAILED", "FINISHED"), f"{job}\n{m.log_tail()}"
            return bool(job.get("last_epoch")) and job["last_epoch"]["state"] == "COMMITTED"

        wait_for("the live job's first committed epoch", committed, SPARK)
        yield s
    finally:
        stop_all([m])


def _ended_jobs(store_url: str) -> None:
    st = open_store(store_url)
    try:
        for name, state in ENDED.items():
            spec = {"name": name, "sources": ["generator()"], "sinks": ["files('/x')"]}
            st.create_job(job_id(name), name, {**spec, "config": {}}, {})
            error = "RuntimeError: the app raised" if state == JobState.FAILED else None
            st.set_job_state(job_id(name), state, error)
    finally:
        st.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page of a fresh context: no token yet (an empty sessionStorage)."""
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    ctx.set_default_timeout(STEP * 1000)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def with_token(page: Any, value: str) -> None:
    """Put ``value`` into the tab's sessionStorage, as the token form does, before any load."""
    page.context.add_init_script(f"sessionStorage.setItem('stoker-token', {value!r});")


def shot(page: Any, server: Server, name: str) -> None:
    page.screenshot(path=str(server.shots / f"{name}.png"), full_page=True)


def _int(text: str | None) -> int:
    """A number cell's value; -1 for an empty one (a dash)."""
    digits = (text or "").replace(",", "").strip()
    return int(digits) if digits.isdigit() else -1


# ---------------------------------------------------------------------------------------------
def test_jobs_page_asks_for_the_token_then_lists_the_live_job_and_updates_without_reload(
    server: Server, page: Any
) -> None:
    page.goto(f"{server.url}/ui/jobs")
    assert page.title() == "Jobs · stoker"
    page.wait_for_selector("#auth:not([hidden])")
    page.get_by_label("API token (kept in this tab only)").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()
    row = page.locator(f'tr[data-job="{JOB}"]')
    row.wait_for()
    assert page.locator("#auth").is_hidden()
    for name in ENDED:
        assert page.locator(f'tr[data-job="{name}"]').count() == 1
    # A mark on the window: a reload would drop it.
    page.evaluate("window.__stillTheSamePage = true")
    first = _int(row.locator(".last-epoch").text_content())
    page.wait_for_function(
        """([job, first]) => {
            const cell = document.querySelector(`tr[data-job="${job}"] .last-epoch`);
            return cell && Number(cell.textContent.replace(/,/g, "")) > first;
        }""",
        arg=[JOB, first],
    )
    assert page.evaluate("window.__stillTheSamePage") is True
    assert "RUNNING" in (row.locator(".state").text_content() or "")
    shot(page, server, "jobs")

    # The filter: only the CANCELED ones.
    page.get_by_label("State").select_option("CANCELED")
    page.wait_for_selector(f'tr[data-job="{JOB}"]', state="detached")
    assert page.locator('tr[data-job="orders-backfill"]').count() == 1


def test_job_page_shows_state_epochs_charts_and_timeline(server: Server, page: Any) -> None:
    with_token(page, TOKEN)
    page.goto(f"{server.url}/ui/jobs/{JOB}")
    assert page.title() == f"Job {JOB} · stoker"
    page.wait_for_selector("#job-state")
    assert page.locator("#job-state").text_content() in ("RUNNING", "PAUSED")
    page.wait_for_selector("#epochs-table tbody tr td.n")
    page.wait_for_selector(".chart canvas")  # uPlot drew from the fragment's JSON
    page.wait_for_selector("#timeline-table")
    page.wait_for_selector("#rescales-table")
    # Each attempt's driver log, fetched with the token.
    page.get_by_role("button", name="log of attempt 1").click()
    page.wait_for_function(
        "() => { const l = document.getElementById('log');"
        " return !l.hidden && l.textContent !== 'Loading…'; }"
    )
    assert "Refused" not in (page.locator("#log").text_content() or "")
    # The link to the driver's Spark UI (the job runs with spark.ui.enabled), and it answers.
    link = page.locator("#spark-ui a")
    spark_ui = link.get_attribute("href")
    assert spark_ui and spark_ui.startswith("http://") and spark_ui == link.text_content()
    apps = httpx.get(f"{spark_ui}/api/v1/applications", timeout=10.0)
    assert apps.status_code == 200 and len(apps.json()) == 1, apps.text
    shot(page, server, "job")


def _tab_to(page: Any, label: str, most: int = 80) -> None:
    """Press Tab until the focused element is the button ``label``."""
    for _ in range(most):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "() => document.activeElement && document.activeElement.tagName === 'BUTTON'"
            " ? document.activeElement.textContent.trim() : ''"
        )
        if focused == label:
            return
    raise AssertionError(f"the {label!r} button is not reachable with Tab")


def _statuses(page: Any, kind: str, until: str, then: Any = None) -> list[str]:
    """The statuses the newest ``kind`` row of the timeline shows, in the order seen, until
    it shows ``until``; ``then`` runs once when the row first shows PENDING."""
    seen: list[str] = []
    deadline = time.monotonic() + STEP
    while time.monotonic() < deadline:
        cell = page.locator(f'#timeline-table tr[data-kind="{kind}"] .status').first
        text = (cell.text_content() or "").strip() if cell.count() else ""
        if text and (not seen or seen[-1] != text):
            seen.append(text)
            if text == "PENDING" and then is not None:
                then()
        if text == until:
            return seen
        page.wait_for_timeout(100)
    raise AssertionError(f"the {kind} event never showed {until}; seen {seen}")


def test_pause_by_keyboard_config_from_the_form_then_resume(server: Server, page: Any) -> None:
    with_token(page, TOKEN)
    page.goto(f"{server.url}/ui/jobs/{JOB}")
    page.wait_for_selector("#actions")

    # Pause, reached with Tab and pressed with Enter.
    _tab_to(page, "Pause")
    page.keyboard.press("Enter")
    assert _statuses(page, "pause", "COMMITTED")[-1] == "COMMITTED"
    page.wait_for_function("() => document.getElementById('job-state').textContent === 'PAUSED'")
    assert server.job()["paused"] is True

    # A config change while paused stays PENDING (no epoch runs); the resume lets the next
    # epoch apply it (it then sleeps delay_s: APPLIED for a while) and commit it.
    page.get_by_label("delay_s (number)").fill("5")
    page.get_by_role("button", name="Send config").click()
    page.wait_for_selector('#timeline-table tr[data-kind="config"]')
    seen = _statuses(
        page,
        "config",
        "COMMITTED",
        then=lambda: page.get_by_role("button", name="Resume").click(),
    )
    assert seen == ["PENDING", "APPLIED", "COMMITTED"], seen
    assert _statuses(page, "resume", "COMMITTED")[-1] == "COMMITTED"
    row = page.locator('#timeline-table tr[data-kind="config"]').first
    assert "operator" in (row.text_content() or "")  # the sender: the full token's role
    page.wait_for_function("() => document.getElementById('job-state').textContent === 'RUNNING'")
    shot(page, server, "job-control")


def test_read_only_token_shows_everything_but_no_action(server: Server, page: Any) -> None:
    with_token(page, READ_TOKEN)
    page.goto(f"{server.url}/ui/jobs/{JOB}")
    page.wait_for_selector("#read-only")
    page.wait_for_selector("#timeline-table")
    page.wait_for_selector("#epochs-table")
    assert page.locator("#actions").count() == 0
    assert page.locator("form.action").count() == 0
    for name in ("Pause", "Resume", "Checkpoint now"):
        assert page.get_by_role("button", name=name).count() == 0
    shot(page, server, "job-read-only")


def test_wrong_token_is_refused_and_asked_again(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/ui/jobs")
    page.wait_for_selector("#auth:not([hidden])")
    page.get_by_label("API token (kept in this tab only)").fill("not-the-token")
    page.get_by_role("button", name="Use token").click()
    page.wait_for_function(
        "() => document.getElementById('auth-why').textContent.includes('wrong token')"
    )
    assert page.locator("#auth").is_visible()
    assert page.locator("#jobs-table").count() == 0
    shot(page, server, "token-refused")
    # Asked again: the right one shows the jobs.
    page.get_by_label("API token (kept in this tab only)").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()
    page.wait_for_selector(f'tr[data-job="{JOB}"]')


@pytest.mark.parametrize(
    ("path", "title", "ready"),
    [
        ("/ui/jobs", "Jobs", "#jobs-table"),
        (f"/ui/jobs/{JOB}", f"Job {JOB}", "#actions"),
        ("/ui/applications", "Applications", "#apps-table"),
        ("/ui/clusters", "Clusters", "#clusters p, #clusters section"),
        ("/ui/manager", "Job manager", "#manager-facts"),
    ],
)
def test_every_page_has_a_title_and_every_field_a_label(
    server: Server, page: Any, path: str, title: str, ready: str
) -> None:
    with_token(page, TOKEN)
    page.goto(f"{server.url}{path}")
    page.wait_for_selector(ready)
    assert page.title() == f"{title} · stoker"
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
             .filter(el => el.type !== 'hidden' && (!el.labels || el.labels.length === 0))
             .map(el => el.id || el.name)"""
    )
    assert unlabelled == []
    buttons = page.evaluate(
        "() => [...document.querySelectorAll('button')].filter(b => b.tabIndex < 0).length"
    )
    assert buttons == 0  # every action is in the Tab order
    if path == "/ui/manager":
        assert "leader" in (page.locator("#manager-facts").text_content() or "")
        shot(page, server, "manager")


def test_an_unchanged_fragment_is_not_sent_again_and_a_changed_one_is(
    server: Server, page: Any
) -> None:
    """The page sends the digest of what a live section shows; the server answers 204 (no
    body, nothing swapped) while it has not changed, and the whole fragment once it has."""
    with_token(page, TOKEN)
    answers: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda r: answers.append((r.url, r.status)) if "/ui/f/" in r.url else None,
    )
    page.goto(f"{server.url}/ui/jobs")
    page.wait_for_selector(f'tr[data-job="{JOB}"]')
    # Only the ended jobs: nothing in the table changes from one poll to the next.
    page.get_by_label("State").select_option("CANCELED")
    page.wait_for_selector(f'tr[data-job="{JOB}"]', state="detached")
    table = page.locator("#jobs-table tbody")
    table.evaluate("el => { el.__kept = true; }")  # gone if the section is swapped again
    start = len(answers)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and [s for _, s in answers[start:]].count(204) < 2:
        page.wait_for_timeout(500)
    unchanged = [s for u, s in answers[start:] if "/ui/f/jobs" in u]
    assert unchanged.count(204) >= 2, answers[start:]
    assert table.evaluate("el => el.__kept === true")  # not swapped: the same element
    # The live job's table changes with every epoch: whole fragments keep coming.
    page.get_by_label("State").select_option("")
    page.wait_for_selector(f'tr[data-job="{JOB}"]')
    first = _int(page.locator(f'tr[data-job="{JOB}"] .last-epoch').text_content())
    page.wait_for_function(
        """([job, first]) => {
            const cell = document.querySelector(`tr[data-job="${job}"] .last-epoch`);
            return cell && Number(cell.textContent.replace(/,/g, "")) > first;
        }""",
        arg=[JOB, first],
    )
