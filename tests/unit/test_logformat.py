"""``--log-format json``: one JSON object a line, with the job, attempt and epoch bound."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from stoker import logformat
from stoker.errors import InvalidInput


def _capture(formatter: logging.Formatter) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logger = logging.getLogger("stoker.test_logformat")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, out
    finally:
        logger.removeHandler(handler)
        logformat.bind(None, process=True)
        logformat._process.clear()


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    yield from _capture(logformat.JsonFormatter())


@pytest.fixture
def captured_text() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    yield from _capture(logformat.TextFormatter())


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_has_ts_level_logger_message(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = captured
    logformat.bind(None, process=True)
    logger.warning("%d rows", 5)
    (rec,) = _lines(out)
    assert rec["level"] == "WARNING" and rec["logger"] == "stoker.test_logformat"
    assert rec["message"] == "5 rows" and str(rec["ts"]).endswith("Z")
    assert "job" not in rec and "epoch" not in rec  # not known: left out


def test_job_attempt_epoch_bound_in_this_thread(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    logformat.bind("orders", 3, 41)
    logger.info("epoch committed")
    rec = _lines(out)[0]
    assert (rec["job"], rec["attempt"], rec["epoch"]) == ("orders", 3, 41)


def test_the_process_binding_reaches_other_threads(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    logformat.bind("orders", 2, process=True)
    logformat.bind("orders", 2, 7)  # an epoch of the process's job: seen everywhere
    t = threading.Thread(target=lambda: logger.info("from a thread"))
    t.start()
    t.join()
    rec = _lines(out)[0]
    assert (rec["job"], rec["attempt"], rec["epoch"]) == ("orders", 2, 7)


def test_an_exception_is_kept(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = captured
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    assert "ValueError: boom" in str(_lines(out)[0]["exc"])


def test_an_unknown_format_names_the_option() -> None:
    with pytest.raises(InvalidInput) as e:
        logformat.check_format("xml")
    assert e.value.field == "--log-format"


def test_a_redacted_traceback_stays_redacted(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    from stoker.redact import redact_logs

    logger, out = captured
    redact_logs(logger.handlers)
    try:
        raise ValueError("cannot open postgresql://user:hunter2@db/x")
    except ValueError:
        logger.exception("failed")
    line = out.getvalue()
    assert "hunter2" not in line and "ValueError" in json.loads(line)["exc"]


# Issue 23 item 6: in a process of several jobs, each text line names its job.
def _in_thread(fn: object) -> None:
    t = threading.Thread(target=fn)  # type: ignore[arg-type]
    t.start()
    t.join()


def test_a_line_logged_for_a_job_of_an_application_names_it(
    captured_text: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = captured_text

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
    assert lines[0].split(" ", 2)[2] == "[app2.clicks] stoker.test_logformat: epoch 3 committed"
    assert lines[1].split(" ", 2)[2] == "[app2.views] stoker.test_logformat: epoch 1 failed"
    assert "[" not in lines[-1]


def test_a_driver_of_one_job_does_not_repeat_its_id(
    captured_text: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = captured_text

    def driver() -> None:
        logformat.bind("orders", 1, process=True)
        log.info("epoch 0 committed")

    _in_thread(driver)
    assert out.getvalue().split(" ", 2)[2] == "stoker.test_logformat: epoch 0 committed\n"
