"""The files source's date and time columns on real Spark (issue 41 item 1): a schema with
``timestamp``, ``timestamp_ntz`` and ``date`` columns reads JSON lines, CSV and Parquet, and
every value is the one Spark's own file sources read from the same file in the same session
time zone (a naive time is local to ``spark.sql.session.timeZone``, one with a zone is that
instant; a Parquet timestamp is an instant), checked value by value, not only that it runs.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import stoker
from stoker import JobState, Pipeline, sinks, sources

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The columns as the port of Spark's windowed word count has them, and the other two
# kinds of date and time.
SCHEMA = "value string, timestamp timestamp, ntz timestamp_ntz, d date"
# Not the machine's zone (UTC here): a reader that ignores the session's zone reads naive
# times wrong. Los Angeles has a DST gap (2024-03-10 02:00-03:00) and overlap (2024-11-03 01:xx).
ZONE = "America/Los_Angeles"

TIMESTAMPS = [
    "2024-03-10 12:34:56",
    "2024-03-10T12:34:56.123Z",
    "2024-03-10T12:34:56+02:00",
    "2024-03-10T12:34:56.1234567+0530",
    "2024-03-10T12:34:56.5-07:00",
    "2024-03-10T02:30:00",  # in the spring-forward gap
    "2024-11-03 01:30:00",  # in the fall-back overlap: the earlier offset
    "2024-03-10",
    "2024-03-10T12:34",
    "2024-3-1 1:2:3",
    "2024-03-10 12:34:56 UTC",
    "2024-03-10T12:34:56 Europe/Paris",
    "1969-12-31T23:59:59.999999Z",
    "not a time",
    None,
]
NAIVE = [
    "2024-03-10 12:34:56",
    "2024-03-10T12:34:56.123",
    "2024-03-10T12:34:56+02:00",  # a zone in a timestamp_ntz: Spark reads null
    "2024-03-10",
    "2024-03-10T12:34:56.123456789",
    "nope",
    None,
]
DATES = ["2024-03-10", "2024-3-1", "2024-03-10T10:00:00", "2024-03-10 12:00", "nope", None]

# Values known without Spark, as microseconds since the epoch (UTC) for `timestamp`.
KNOWN = {
    "2024-03-10 12:34:56": 1710099296000000,  # 12:34:56 PDT = 19:34:56Z
    "2024-03-10T12:34:56.123Z": 1710074096123000,
    "2024-03-10T02:30:00": 1710066600000000,  # Java's rule: the offset before the gap
    "2024-11-03 01:30:00": 1730622600000000,  # PDT (-7), the earlier offset
}


# Columns of one shape each, which pyarrow's kernels convert (the DST gap makes them refuse:
# that file goes value by value); the test runs both ways against Spark.
UNIFORM = {
    "naive": ["2024-03-10 12:34:56", "2024-11-03 01:30:00", "2024-07-01T00:00:00.000001", None],
    "zoned": ["2024-03-10T12:34:56.123Z", "2024-03-10T12:34:56+02:00", "2024-11-03T01:30:00-07:00"],
    "gap": ["2024-03-10 02:30:00", "2024-03-10 12:00:00"],
}


def _uniform(prefix: str, times: list[str | None]) -> list[dict[str, Any]]:
    return [
        {"value": f"{prefix}{i}", "timestamp": t, "ntz": "2024-03-10 12:34:56.5", "d": "2024-03-10"}
        for i, t in enumerate(times)
    ]


def _csv(path: Path, rows: list[dict[str, Any]]) -> None:
    lines = ["value,timestamp,ntz,d"]
    for r in rows:
        lines.append(
            ",".join("" if r[k] is None else r[k] for k in ("value", "timestamp", "ntz", "d"))
        )
    path.write_text("\n".join(lines) + "\n")


def _rows(prefix: str) -> list[dict[str, Any]]:
    n = max(len(TIMESTAMPS), len(NAIVE), len(DATES))
    return [
        {
            "value": f"{prefix}{i}",
            "timestamp": TIMESTAMPS[i % len(TIMESTAMPS)],
            "ntz": NAIVE[i % len(NAIVE)],
            "d": DATES[i % len(DATES)],
        }
        for i in range(n)
    ]


def _write_inputs(root: Path) -> dict[str, Path]:
    """One folder per format, each with its file(s); the path of each file by format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: dict[str, Path] = {}
    (root / "json").mkdir(parents=True)
    files["json"] = root / "json" / "t.json"
    files["json"].write_text("".join(json.dumps(r) + "\n" for r in _rows("j")))
    for name, rows in (
        ("u", _uniform("ju", UNIFORM["naive"])),
        ("g", _uniform("jg", UNIFORM["gap"])),
    ):
        (root / "json" / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "csv").mkdir()
    files["csv"] = root / "csv" / "t.csv"
    _csv(files["csv"], _rows("c"))
    _csv(root / "csv" / "u.csv", _uniform("cu", UNIFORM["zoned"]))
    (root / "parquet").mkdir()
    files["parquet"] = root / "parquet" / "t.parquet"
    when = dt.datetime(2024, 3, 10, 12, 34, 56, 789012)
    table = pa.table(
        {
            "value": ["p-aware", "p-naive", "p-null"],
            # An instant (isAdjustedToUTC) and a naive time: Spark reads both as UTC.
            "timestamp": pa.array(
                [when.replace(tzinfo=dt.UTC), when, None], pa.timestamp("us", tz="UTC")
            ),
            "ntz": pa.array([when, when, None], pa.timestamp("us")),
            "d": pa.array([when.date(), dt.date(1999, 12, 31), None], pa.date32()),
        }
    )
    pq.write_table(table, files["parquet"])
    # Pyarrow's naive timestamps and the INT96 of Spark's default Parquet output, nanoseconds.
    naive = table.set_column(1, "timestamp", table.column("timestamp").cast(pa.timestamp("ns")))
    naive = naive.set_column(0, "value", pa.array(["q-ns", "q-naive", "q-null"]))
    pq.write_table(naive, root / "parquet" / "u.parquet", use_deprecated_int96_timestamps=True)
    return files


def _values(df: Any) -> dict[str, tuple[Any, ...]]:
    """value -> (micros since the epoch, the naive time as text, the date as text)."""
    rows = df.selectExpr(
        "value",
        "unix_micros(timestamp) AS us",
        "CAST(ntz AS STRING) AS ntz",
        "CAST(d AS STRING) AS d",
    ).collect()
    return {r["value"]: (r["us"], r["ntz"], r["d"]) for r in rows}


@pytest.fixture
def session_zone(spark: SparkSession) -> Iterator[str]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", ZONE)
    try:
        yield ZONE
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def test_dates_and_times_read_as_spark_reads_them_in_the_session_zone(
    spark: SparkSession, tmp_path: Path, session_zone: str
) -> None:
    files = _write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    p = Pipeline("times")
    for fmt in ("json", "csv", "parquet"):
        p.source(sources.files(str(files[fmt].parent), fmt, SCHEMA, bounded=True))
    p.sink(sinks.files(str(out), format="parquet"))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger="100ms", spark=spark)
    assert result.state == JobState.FINISHED, result

    got = _values(spark.read.parquet(*[str(d) for d in sorted(out.glob("epoch=*"))]))
    expected: dict[str, tuple[Any, ...]] = {}
    for fmt, path in files.items():
        reader = spark.read.schema(SCHEMA).option("header", "true").format(fmt)
        expected.update(_values(reader.load(str(path.parent))))
    assert sorted(got) == sorted(expected)
    assert len(got) == 2 * len(TIMESTAMPS) + sum(map(len, UNIFORM.values())) + 6
    wrong = {v: (got.get(v), want) for v, want in expected.items() if got.get(v) != want}
    assert not wrong, f"value: (stoker, Spark's own reader) where they differ: {wrong}"

    by_text = {r["timestamp"]: got[r["value"]][0] for r in _rows("j")}
    for text, micros in KNOWN.items():
        assert by_text[text] == micros, text
    assert got["p-aware"] == (1710074096789012, "2024-03-10 12:34:56.789012", "2024-03-10")
    assert got["q-ns"][0] == got["p-naive"][0] == 1710074096789012
    assert by_text["not a time"] is None
