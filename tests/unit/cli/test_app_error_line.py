"""An application's error in the CLI (issue 39 item 7): main's error carries its traceback
(type and message first, then where it was raised); ``stoker app status`` and the attached
``stoker run --driver`` show it on one line, naming where main raised it and how to see it
whole."""

from __future__ import annotations

import pytest

from stoker.cli.apps import _error_line, print_status

ERROR = (
    "RuntimeError: boom\n"
    "Traceback (most recent call last):\n"
    '  File "/apps/app.py", line 9, in main\n'
    '    raise RuntimeError("boom")\n'
    "RuntimeError: boom"
)
LINE = "RuntimeError: boom (at /apps/app.py, line 9, in main)"


def test_mains_error_is_one_line_with_where_it_was_raised() -> None:
    assert _error_line("a", ERROR) == f"{LINE} (the whole error: stoker app status a --json)"
    assert _error_line("a", "job a.x failed: boom") == "job a.x failed: boom"


def test_app_status_shows_it_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    attempt = {"attempt": 1, "state": "FAILED", "pid": 0, "host": "h", "started_at": 0.0}
    print_status(
        {
            "app_id": "a",
            "state": "FAILED",
            "error": ERROR,
            "attempt": 1,
            "attempts": [{**attempt, "error": ERROR}],
            "cluster": {"spec": "local"},
            "jobs": [],
        }
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"state       FAILED  ({LINE})"
    assert out[3] == f"  error     {LINE} (the whole error: stoker app status a --json)"
    assert "Traceback" not in "\n".join(out)
