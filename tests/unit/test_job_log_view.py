"""Issue 23 item 6: a job's log view is cut out of its application's driver log: its lines,
what continues them (a traceback), nothing of another job's and none of Spark's. (That each
line names its job: tests/unit/test_logformat.py.)"""

from __future__ import annotations

import json

from stoker.manager.logs import job_lines

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
