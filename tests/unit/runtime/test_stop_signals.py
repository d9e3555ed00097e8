"""StopSignals, with real signals sent to this process: the first stops gracefully, a second
one while the graceful stop waits for the epoch in flight stops at once and says so."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from stoker.runtime.job.signals import StopNow, StopSignals


def test_a_second_signal_while_the_query_runs_stops_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="stoker.runner")
    with StopSignals() as s:
        s.deferred = True  # the query runs: the supervise loop stops it between epochs
        s.in_flight = lambda: 7
        os.kill(os.getpid(), signal.SIGTERM)  # only recorded: the epoch in flight commits
        assert (s.received, s.forced) == (signal.SIGTERM, False)
        with pytest.raises(StopNow) as stopped:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs right after os.kill returns; never reached
        assert s.forced
        # A third signal while the end is recorded is only noted.
        os.kill(os.getpid(), signal.SIGTERM)
    assert isinstance(stopped.value, KeyboardInterrupt)  # the attempt ends SUSPENDED
    said = str(stopped.value)
    assert said == (
        "second signal (SIGINT): stopping now without waiting for epoch 7; the job is "
        "SUSPENDED and resumes from its last committed epoch"
    )
    assert said in caplog.text
    assert "a second signal stops it at once" in caplog.text


def test_the_message_names_no_epoch_when_none_is_known() -> None:
    s = StopSignals()

    def broken() -> int | None:
        raise OSError("checkpoint gone")

    s.in_flight = broken
    assert "without waiting for the epoch in flight;" in s.now_message("SIGTERM")
