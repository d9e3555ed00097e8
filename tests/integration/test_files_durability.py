"""The files sink's prepare leaves its part on disk before the epoch's decision: Spark's writer
leaves its files in the page cache, and a part decided on the strength of them could come back
empty or truncated after a power loss. Real Spark writes the part; every fsync on the way is
recorded (and still done)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from stoker.sinks.base import SinkOwner
from stoker.sinks.files import FilesSink
from stoker.types import AttemptNo, Epoch, JobId
from tests.support.fsyncs import FsyncLog, everything_under

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OWNER = SinkOwner(JobId("durable"), "d00d1e55")


@pytest.mark.parametrize("fmt", ["parquet", "json"])  # footers counted / an Observation
def test_prepare_fsyncs_every_file_and_folder_spark_wrote(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    sink = FilesSink(path=str(tmp_path / "out"), format=fmt)
    sink.validate(OWNER)
    sink.open(OWNER, tmp_path / "state")
    log = FsyncLog(monkeypatch)

    prepared = sink.prepare(spark.range(300).repartition(3), Epoch(0), AttemptNo(1))

    staged = Path(prepared.detail["staged"])
    written = everything_under(staged)
    assert len([p for p in written if Path(p).name.startswith("part-")]) == 3
    assert written - log.synced() == set()
    assert str(sink.staging) in log.synced()  # the staged folder's own entry
    assert prepared.rows == 300
