"""stoker.errors: messages built by the exception, exit codes."""

from __future__ import annotations

from stoker.errors import (
    ApplicationNotFound,
    InvalidInput,
    JobNotFound,
    JobTerminal,
    exit_code,
)


def test_with_hint_keeps_the_class_and_fields_and_adds_the_hint_after_the_message() -> None:
    err = ApplicationNotFound("a1")
    hinted = err.with_hint("it is a job: stoker status a1")
    assert type(hinted) is ApplicationNotFound
    assert str(hinted) == "application 'a1' not found (it is a job: stoker status a1)"
    assert hinted.app_id == "a1" and hinted.job_id == "a1"
    assert exit_code(hinted) == exit_code(err) == 3
    assert str(err) == "application 'a1' not found"  # the original is left as it was


def test_with_message_replaces_the_words_only() -> None:
    err = JobTerminal("j", "FAILED").with_message("job 'j' has ended: its scaling cannot change")
    assert isinstance(err, JobTerminal)
    assert (err.job_id, err.state) == ("j", "FAILED")
    assert str(err) == "job 'j' has ended: its scaling cannot change"
    bad = InvalidInput("field", "no").with_message("the server's words")
    assert bad.field == "field" and str(bad) == "the server's words"
    assert str(JobNotFound("x").with_message("gone")) == "gone"
