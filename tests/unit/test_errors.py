"""stoker.errors: messages built by the exception, exit codes."""

from __future__ import annotations

from stoker.errors import (
    EXIT_CODES,
    ApplicationNotFound,
    InvalidInput,
    InvalidSink,
    InvalidSource,
    JobNotFound,
    JobTerminal,
    SinkError,
    SourceError,
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


def test_a_sink_or_source_failing_at_run_time_is_not_bad_input() -> None:
    for cls in (SinkError, SourceError):
        err = cls("files", "epoch 3 was decided for attempt 1 but its part is missing")
        assert not isinstance(err, InvalidInput)
        assert exit_code(err) == 16
        assert str(err) == "files: epoch 3 was decided for attempt 1 but its part is missing"


def test_a_sink_or_source_the_user_described_wrong_is_bad_input_and_still_about_it() -> None:
    sink = InvalidSink("files.format", "unknown format 'xml'")
    source = InvalidSource("files.path", "input folder '/x' does not exist")
    assert isinstance(sink, InvalidInput) and isinstance(sink, SinkError)
    assert isinstance(source, InvalidInput) and isinstance(source, SourceError)
    assert exit_code(sink) == exit_code(source) == 2
    assert (sink.field, sink.message) == ("files.format", "unknown format 'xml'")


def test_every_exit_code_but_the_shared_ones_is_one_kind_of_failure() -> None:
    # Several "not found" share 3 and several conflicts 9; 16 is the sinks' and sources'.
    assert EXIT_CODES[SinkError] == EXIT_CODES[SourceError] == 16
    others = {c for cls, c in EXIT_CODES.items() if cls not in (SinkError, SourceError)}
    assert 16 not in others
