"""A standby's warm-up query (``runtime/job/standby.warm_up``) in a real session: it runs the
epochs it is asked for, one after the other (not one epoch of the whole backlog, which is what
Spark makes of a Python source under ``availableNow``), and leaves nothing behind."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import pytest

from stoker.runtime.job import standby


def test_the_warm_up_runs_its_epochs_and_removes_its_folder(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(standby.WARM_UP_EPOCHS, "3")
    with caplog.at_level(logging.INFO, logger="stoker.standby"):
        standby.warm_up(spark)
    said = [r.getMessage() for r in caplog.records if "warm-up" in r.getMessage()]
    assert any("(3 epochs)" in m for m in said), said
    assert not list(tmp_path.glob(f"{standby.WARM_UP_PREFIX}*"))
    assert not spark.streams.active
