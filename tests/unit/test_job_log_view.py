"""Issue 23 item 6: in a process of several jobs (an application's driver) each of stoker's
text lines names its job, and a job's log view is cut out of the application's log: its lines,
what continues them (a traceback), nothing of another job's and none of Spark's."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from stoker import logformat
from stoker.manager.logs import job_lines


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logformat.TextFormatter())
    log = logging.getLogger("stoker.test_job_log_view")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    saved = dict(logformat._process)
    logformat._process.clear()
    try:
        yield log, out
    finally:
        log.removeHandler(handler)
        logformat._process.clear()
        logformat._process.update(saved)


def _in_thread(fn: object) -> None:
    t = threading.Thread(target=fn)  # type: ignore[arg-type]
    t.start()
    t.join()


def test_a_line_logged_for_a_job_of_an_application_names_it(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = captured

    def clicks() -> None:
        logformat.bind("app2.clicks", 1)  # a job's thread in an application's driver
        log.info("epoch 3 committed")

    def views() -> None:
        logformat.bind("app2.views", 1)
        try:
            raise ValueError("bad row")
        except ValueError:
            log.exception("epoch 1 failed")

    _in_thread(clicks)
    _in_thread(views)
    _in_thread(lambda: log.info("the application's own line"))
    lines = out.getvalue().splitlines()
    assert lines[0].split(" ", 2)[2] == "[app2.clicks] stoker.test_job_log_view: epoch 3 committed"
    assert lines[1].split(" ", 2)[2] == "[app2.views] stoker.test_job_log_view: epoch 1 failed"
    assert "[" not in lines[-1]


def test_a_driver_of_one_job_does_not_repeat_its_id(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = captured

    def driver() -> None:
        logformat.bind("orders", 1, process=True)
        log.info("epoch 0 committed")

    _in_thread(driver)
    assert out.getvalue().split(" ", 2)[2] == "stoker.test_job_log_view: epoch 0 committed\n"


APP_LOG = """\
2026-11-28 07:00:00,001 stoker.appdriver: application app2 attempt 1
2026-11-28 07:00:01,002 [app2.clicks] stoker.runtime: starting Spark
26/11/28 07:00:02 WARN NativeCodeLoader: Unable to load native-hadoop library
2026-11-28 07:00:03,003 [app2.views] stoker.epoch: epoch 1 failed
Traceback (most recent call last):
  File "app.py", line 3, in f
ValueError: bad row
2026-11-28 07:00:04,004 [app2.clicks] stoker.epoch: epoch 0 committed
Traceback (most recent call last):
ValueError: only the clicks' own
2026-11-28 07:00:05,005 [app2.clicks.more] stoker.epoch: a job whose id extends it
"""


def test_a_jobs_view_keeps_its_lines_and_what_continues_them() -> None:
    assert job_lines(APP_LOG, "app2.clicks") == [
        "2026-11-28 07:00:01,002 [app2.clicks] stoker.runtime: starting Spark\n",
        "2026-11-28 07:00:04,004 [app2.clicks] stoker.epoch: epoch 0 committed\n",
        "Traceback (most recent call last):\n",
        "ValueError: only the clicks' own\n",
    ]
    views = job_lines(APP_LOG, "app2.views")
    assert [ln.strip() for ln in views][1:] == [
        "Traceback (most recent call last):",
        'File "app.py", line 3, in f',
        "ValueError: bad row",
    ]


def test_json_lines_are_kept_by_their_job_field() -> None:
    mine = json.dumps({"ts": "t", "level": "INFO", "message": "m", "job": "a.x"})
    other = json.dumps({"ts": "t", "level": "INFO", "message": "n", "job": "a.y"})
    none = json.dumps({"ts": "t", "level": "INFO", "message": "app"})
    text = "\n".join([mine, other, none, "{not json", mine]) + "\n"
    assert job_lines(text, "a.x") == [mine + "\n", mine + "\n"]
