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


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logformat.JsonFormatter())
    logger = logging.getLogger("stoker.test_logformat")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, out
    finally:
        logger.removeHandler(handler)
        logformat.bind(None, process=True)


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
