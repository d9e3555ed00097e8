"""The attached CLI's live view: its renderer is a pure function, tested without a terminal."""

from __future__ import annotations

import io

import pytest

from stoker.cli.display import (
    job_status,
    live_wanted,
    render_status,
    render_view,
    rows_per_second,
    submitted,
)

VIEW = {
    "job_id": "orders",
    "state": "RUNNING",
    "attempt": {"attempt": 2, "pid": 123},
    "last_error": None,
}
EPOCHS = [  # newest first, as GET /v1/jobs/{id}/epochs answers
    {"epoch": 42, "state": "PINNED", "rows": None, "pinned_at": 20.0, "committed_at": None},
    {
        "epoch": 41,
        "state": "COMMITTED",
        "rows": 1200,
        "backlog": 30,
        "pinned_at": 19.0,
        "committed_at": 20.0,
    },
    {
        "epoch": 40,
        "state": "COMMITTED",
        "rows": 800,
        "backlog": 80,
        "pinned_at": 18.0,
        "committed_at": 19.0,
    },
]
CONTROL = [{"kind": "config", "status": "APPLIED", "applied_epoch": 41}]


def test_status_of_a_running_job() -> None:
    s = job_status(VIEW, EPOCHS, CONTROL)
    assert s["epoch"] == 41 and s["rows"] == 1200 and s["backlog"] == 30
    assert s["attempt"] == 2
    assert s["rows_per_s"] == pytest.approx(1000.0)  # 2,000 rows from 18.0 s to 20.0 s
    assert s["control"] == {"kind": "config", "status": "APPLIED", "applied_epoch": 41}


def test_render_a_running_job_on_one_line() -> None:
    line = render_status(job_status(VIEW, EPOCHS, CONTROL))
    assert line == (
        "orders  RUNNING  attempt 2  epoch 41 (1,200 rows)  1,000 rows/s  backlog 30  "
        "control config APPLIED@41"
    )


def test_render_before_the_first_epoch_and_without_control() -> None:
    line = render_status(job_status({"job_id": "j", "state": "CREATED"}, []))
    assert line == "j  CREATED  no epoch yet  - rows/s  backlog -"


def test_render_an_error_on_a_line_of_its_own() -> None:
    view = {**VIEW, "state": "FAILED", "last_error": "ValueError: boom"}
    text = render_status(job_status(view, EPOCHS))
    assert text.splitlines()[1] == "  error: ValueError: boom"


def test_large_rates_are_shortened() -> None:
    epochs = [
        {"state": "COMMITTED", "epoch": 1, "rows": 50_000, "pinned_at": 0.0, "committed_at": 2.0}
    ]
    assert "25k rows/s" in render_status(job_status(VIEW, epochs))


def test_a_view_of_an_application_has_a_line_per_job() -> None:
    statuses = [job_status(VIEW, EPOCHS), job_status({"job_id": "b", "state": "CREATED"}, [])]
    text = render_view("application app: RUNNING (attempt 1)", statuses)
    lines = text.splitlines()
    assert lines[0] == "application app: RUNNING (attempt 1)"
    assert lines[1].startswith("orders  RUNNING") and lines[2].startswith("b  CREATED")


def test_rate_needs_two_timestamps() -> None:
    assert rows_per_second([]) is None
    assert rows_per_second([{"rows": 5, "pinned_at": 1.0, "committed_at": None}]) is None


def test_live_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert live_wanted(Tty()) is True
    assert live_wanted(io.StringIO()) is False


def test_a_submission_says_what_it_did_and_an_ended_job_how_to_run_it_again() -> None:
    assert submitted("created", "CREATED") == "submitted (CREATED)"
    assert submitted("restarted", "RESTARTING") == "restarted (RESTARTING)"
    assert (
        submitted("duplicate", "RUNNING", ", cluster local")
        == "already live (RUNNING, cluster local)"
    )
    assert submitted("duplicate", "FAILED") == (
        "already ended (FAILED): nothing started; --restart runs it again from its checkpoint"
    )
