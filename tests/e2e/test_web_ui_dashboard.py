"""The job page's dashboard (issue 41 item 8) in real headless Chromium against a real
``stoker server``: the query's operators with Spark's figures, back pressure, the epoch
history with rates and state, the exception history; and the same figures on ``/metrics``.

One manager runs one stateful job on local Spark: a paced generator whose ids become 7 keys,
counted across epochs (Spark's state), into a files sink. Its transform raises in its first
second epoch of its first attempt only (a marker file says it has): attempt 1 fails with the user's
exception at a line of the app file, the restart strategy starts attempt 2, which runs on.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager, stop_all

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
    ),
]

TOKEN = "dash-full-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB = "dash"
KEYS = 7
SPARK = 420.0  # a cold Spark driver (twice: the failed attempt, then the restart)
STEP = 180.0
APP = """\
import os

from stoker import Pipeline, sinks, sources

pipeline = Pipeline({job!r}, output_mode="complete")
pipeline.source(
    sources.generator(rows_per_second=40, partitions=1),
    map=lambda df: df.selectExpr("id % {keys} AS key"),
)


def fail_once(df, ctx):
    if ctx.epoch >= 1 and not os.path.exists({mark!r}):
        open({mark!r}, "w").close()
        raise ValueError("the first epoch fails on purpose")
    return df


pipeline.stream(lambda rows: rows.groupBy("key").count())
pipeline.transform(fail_once)
pipeline.sink(sinks.files({out!r}, format="json"))
"""
FAIL_LINE = 1 + APP.splitlines().index(
    '        raise ValueError("the first epoch fails on purpose")'
)
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "500ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
    "spark.sql.shuffle.partitions": "2",
}


@dataclass
class Server:
    manager: Manager

    @property
    def url(self) -> str:
        return self.manager.url

    def job(self) -> dict[str, Any]:
        return dict(self.manager.http.get(f"/v1/jobs/{JOB}", headers=AUTH).json())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("dashboard")
    allowed = root / "apps"
    allowed.mkdir()
    app = allowed / "dash.py"
    app.write_text(
        APP.format(job=JOB, keys=KEYS, mark=str(root / "failed-once"), out=str(root / "out"))
    )
    m = Manager(
        "dash",
        f"sqlite:///{root / 'store.db'}",
        root / "state",
        [allowed],
        root / "srv.log",
        token=TOKEN,
    )
    try:
        m.wait_up()
        body = {
            "entrypoint": str(app),
            "conf": CONF,
            "restart_strategy": {"strategy": "fixed-delay", "attempts": 3, "delay": 1},
        }
        r = m.http.post("/v1/jobs", headers=AUTH, json=body)
        assert r.status_code == 201, r.text
        s = Server(m)

        def second_attempt_committed() -> bool:
            job = s.job()
            assert job["state"] not in ("FAILED", "FINISHED"), f"{job}\n{m.log_tail()}"
            last = job.get("last_epoch") or {}
            return job["current_attempt"] >= 2 and last.get("state") == "COMMITTED"

        wait_for("attempt 2's first committed epoch", second_attempt_committed, 2 * SPARK)
        yield s
    finally:
        stop_all([m])


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
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    ctx.set_default_timeout(STEP * 1000)
    ctx.add_init_script(f"sessionStorage.setItem('stoker-token', {TOKEN!r});")
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


def _number(text: str | None) -> float | None:
    digits = (text or "").replace(",", "").strip()
    try:
        return float(digits)
    except ValueError:
        return None


def test_operators_show_sparks_state_figures_and_back_pressure(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/ui/jobs/{JOB}")
    # The stateful operator, with as many rows in its state as there are keys (the input
    # reaches every key within the first epochs), its memory and its store's size.
    page.wait_for_function(
        """(keys) => {
            const row = document.querySelector('#operators-table tbody tr');
            return row && row.cells.length > 1
                && Number(row.cells[1].textContent.replace(/,/g, '')) === keys;
        }""",
        arg=KEYS,
    )
    row = page.locator("#operators-table tbody tr").first
    cells = [c.strip() for c in row.locator("td").all_text_contents()]
    assert cells[0] == "stateStoreSave", cells
    assert re.fullmatch(r"[\d,.]+ (B|KiB|MiB)", cells[5]), cells  # memory
    assert re.fullmatch(r"[\d,.]+ (B|KiB|MiB)", cells[6]), cells  # state store size
    # The graph: the source, the stateful operator, the sink, in the query's order.
    kinds = page.locator("#operator-graph > li").evaluate_all("els => els.map(e => e.className)")
    assert kinds == ["op op-source", "op op-state", "op op-sink"], kinds
    source = page.locator(".op-source code").text_content() or ""
    assert source.startswith("generator(") and "rows_per_second=40" in source, source
    # Back pressure: the rate offered and the rate processed, both numbers.
    assert _number(page.locator("#rate-offered").text_content()) is not None
    assert _number(page.locator("#rate-processed").text_content()) is not None
    # The epoch history: rates, Spark's and the write's time, the state's rows and memory.
    head = page.locator("#epochs-table thead th").all_text_contents()
    for col in ("Input (rows/s)", "Processed (rows/s)", "Spark (ms)", "State rows"):
        assert col in head, head
    state_col = head.index("State rows")
    page.wait_for_function(
        """([col, keys]) => [...document.querySelectorAll('#epochs-table tbody tr')].some(
            r => r.cells.length > col
                && Number(r.cells[col].textContent.replace(/,/g, '')) === keys)""",
        arg=[state_col, KEYS],
    )


def test_exception_history_names_the_users_exception_and_line(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/ui/jobs/{JOB}")
    row = page.locator('#exceptions-table tr[data-attempt="1"]')
    row.wait_for()
    cells = [c.strip() for c in row.locator("td").all_text_contents()]
    assert cells[1] == "FAILED", cells
    assert cells[3] == "ValueError: the first epoch fails on purpose", cells
    assert f"dash.py, line {FAIL_LINE}, in fail_once" in cells[4], cells
    assert 'raise ValueError("the first epoch fails on purpose")' in cells[4], cells
    # Attempt 2 runs: no row for it.
    assert page.locator('#exceptions-table tr[data-attempt="2"]').count() == 0


def test_metrics_carry_the_same_figures_with_units_and_help(server: Server) -> None:
    def scrape() -> str | None:
        text = server.manager.http.get("/metrics", headers=AUTH).text
        want = f'stoker_job_state_rows{{job_id="{JOB}",operator="0:stateStoreSave"}} {KEYS}.0'
        return text if want in text else None

    text = wait_for("the state rows on /metrics", scrape, STEP)
    for name in (
        "stoker_job_state_memory_bytes",
        "stoker_job_state_store_size_bytes",
        "stoker_job_state_commit_seconds",
        "stoker_job_epoch_phase_seconds",
        "stoker_job_spark_input_rows_per_second",
        "stoker_job_spark_processed_rows_per_second",
    ):
        assert f"# HELP {name} " in text, name
        assert re.search(rf'^{name}{{job_id="{JOB}"[^}}]*}} [\d.e+-]+$', text, re.M), name
    assert re.search(
        rf'^stoker_job_epoch_phase_seconds{{job_id="{JOB}",phase="addBatch"}} ', text, re.M
    )
