"""py4j logs every exception a Python callback raises back to the JVM, traceback and all. A
job ends its own query by raising :class:`~stoker.runtime.epoch.Stopping` in ``foreachBatch``
(a cancel, a stop, a suspend): that is not an error and stays out of the log; anything else a
callback raises is still logged."""

from __future__ import annotations

import logging

import pytest

from stoker.runtime.epoch import Stopping


@pytest.mark.parametrize("name", ["py4j.clientserver", "py4j.java_gateway"])
def test_py4j_logs_a_callbacks_error_but_not_a_jobs_own_stop(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger(name)
    with caplog.at_level(logging.ERROR, logger=name):
        for exc in (Stopping("epoch 7 not started: the job is stopping"), ValueError("bad row")):
            try:
                raise exc
            except Exception:
                logger.exception("There was an exception while executing the Python Proxy")
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert [type(e) for e in logged] == [ValueError]


def test_py4j_breaking_off_a_call_for_a_stop_signal_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A SIGTERM while Spark starts raises KeyboardInterrupt inside a py4j call; py4j logged
    it on the root logger with its traceback, after stoker's own line saying it stops."""
    import stoker.runtime.job.signals  # noqa: F401 - installs the filter

    root = logging.getLogger()
    with caplog.at_level(logging.ERROR):
        for exc in (KeyboardInterrupt(), ValueError("bad answer")):
            try:
                raise exc
            except BaseException:
                root.exception("KeyboardInterrupt while sending command.")
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            root.exception("something else")
    logged = [(r.getMessage(), type(r.exc_info[1])) for r in caplog.records if r.exc_info]
    assert logged == [
        ("KeyboardInterrupt while sending command.", ValueError),
        ("something else", KeyboardInterrupt),
    ]
