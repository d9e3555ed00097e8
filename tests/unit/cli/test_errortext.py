"""stoker.cli.errortext: the user's exception and frame found in Spark's error text."""

from __future__ import annotations

from stoker.cli.errortext import is_library, one_line, status_lines, summarize

# A Python worker's failure as Spark passes it on: Java's text, pyspark's frames and the
# user's, the exception, Java frames, then the query's logical plan.
SPARK_TEXT = """\
org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 \
failed 1 times, most recent failure: Lost task 0.0 in stage 1.0 (TID 1): \
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/worker.py", line 1900, in main
    process()
  File "/home/me/jobs/sessions.py", line 21, in parse
    return check(row)
  File "/home/me/jobs/sessions.py", line 30, in check
    raise ValueError("boom")
  File "/venv/lib/python3.11/site-packages/pyspark/util.py", line 99, in wrapper
    return f(*args)
ValueError: boom

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(x.scala:1)
\tat org.apache.spark.scheduler.Task.run(Task.scala:147)

=== Streaming Query ===
Current Logical Plan:
WriteToMicroBatchDataSource ForeachBatchSink
+- Project [id#1L]
"""


def test_the_users_exception_and_innermost_frame_of_their_code() -> None:
    s = summarize(SPARK_TEXT)
    assert s.exception == "ValueError: boom"
    assert s.frame is not None
    assert (s.frame.path, s.frame.line, s.frame.function) == (
        "/home/me/jobs/sessions.py",
        30,
        "check",
    )
    assert s.frame.source == 'raise ValueError("boom")'
    assert one_line(SPARK_TEXT) == (
        "ValueError: boom (at /home/me/jobs/sessions.py, line 30, in check)"
    )


def test_what_comes_before_the_wrapper_is_kept() -> None:
    text = (
        "job 'x' failed: An exception was thrown from the Python worker:\n"
        + (SPARK_TEXT[SPARK_TEXT.index("Traceback") :])
    )
    assert one_line(text).startswith("job 'x' failed: ValueError: boom (at /home/me/")


def test_a_text_without_a_traceback_is_its_first_line() -> None:
    s = summarize("java.io.IOException: disk full\n\tat a.b(C.java:1)\n=== Streaming Query ===")
    assert (s.exception, s.frame) == ("java.io.IOException: disk full", None)


def test_library_paths() -> None:
    assert is_library("/venv/lib/python3.11/site-packages/pyspark/sql/udf.py")
    assert is_library("/x/py4j/java_gateway.py")
    assert is_library("<string>")
    assert not is_library("/home/me/jobs/sessions.py")


def test_status_lines_hide_the_rest_unless_verbose() -> None:
    short = status_lines(SPARK_TEXT, verbose=False)
    assert short == [
        "error      ValueError: boom",
        '  at       /home/me/jobs/sessions.py, line 30, in check: raise ValueError("boom")',
        "  (the whole error: --verbose)",
    ]
    whole = status_lines(SPARK_TEXT, verbose=True)
    assert whole[:2] == short[:2]
    assert any("Current Logical Plan:" in ln for ln in whole)


def test_the_clis_one_line_names_the_command_for_the_whole_error() -> None:
    from stoker.cli._common import one_line as cli_line

    text = "job 'sessions' failed: " + SPARK_TEXT
    assert cli_line(text) == (
        "job 'sessions' failed: ValueError: boom (at /home/me/jobs/sessions.py, line 30, in "
        "check) (the whole error: stoker status sessions --verbose)"
    )


# stoker's own refusal as a job's attempt records it: long, and its way out comes last.
OWNED = (
    "files sink /data/out is owned by job 'orders-a' (uid 5d1c...; attempt 3, driver pid 4242 "
    "on host-a): two jobs would write one folder and each one's recovery would roll back the "
    "other's parts. "
    + "Stop that job first, or give this job its own folder. " * 6
    + "Last: DELETE FROM stoker_owners WHERE sink = '/data/out' once job 'orders-a' is gone."
)


def test_stokers_own_message_is_shown_whole_and_a_traceback_still_cut() -> None:
    assert len(OWNED) > 600
    assert one_line(OWNED) == OWNED
    assert status_lines(OWNED, verbose=False)[0] == f"error      {OWNED}"
    huge = "ValueError: " + "x" * 5000
    traced = SPARK_TEXT.replace("ValueError: boom", huge)
    assert one_line(traced).endswith("...")
    assert len(one_line(traced)) <= 400
    plain = "y" * 9000  # a foreign text without a traceback: bounded all the same
    assert len(one_line(plain)) == 4000 and one_line(plain).endswith("...")


def test_the_clis_error_line_keeps_stokers_message_whole(capsys: object) -> None:
    import pytest

    from stoker.cli._common import _fail
    from stoker.errors import InvalidInput

    with pytest.raises(SystemExit) as e:
        _fail(InvalidInput("app", OWNED))
    assert e.value.code == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert err.rstrip().endswith("once job 'orders-a' is gone."), err
