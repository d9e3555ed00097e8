"""The files source's date and time text (stoker.sources._files_time), without Spark: pyarrow's
kernels and the value-by-value rules give the same values on the shapes the kernels take,
and the kernels step aside where they would differ (a DST gap). Spark's own readers are the
reference in tests/integration/test_files_timestamps.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stoker.sources._files_time import (
    _fast,
    date_days,
    from_text,
    instant_micros,
    wall_micros,
    zone,
)

LA = "America/Los_Angeles"
UTC_US = pa.timestamp("us", tz="UTC")


def _slow(texts: list[str | None], target: pa.DataType, session: str) -> list[int | None]:
    tz = zone(session)
    assert tz is not None
    if pa.types.is_date32(target):
        return [None if t is None else date_days(t) for t in texts]
    if target.tz is None:
        return [None if t is None else wall_micros(t) for t in texts]
    return [None if t is None else instant_micros(t, tz) for t in texts]


@pytest.mark.parametrize(
    ("texts", "target"),
    [
        (
            ["2024-03-10 12:34:56", "2024-11-03 01:30:00", "2024-07-01T00:00:00.000001", None],
            UTC_US,
        ),
        (["2024-03-10T12:34:56.123Z", "2024-03-10T12:34:56+02:00", "1969-12-31T23:59:59Z"], UTC_US),
        (["2024-03-10 12:34:56", "2024-03-10T02:30:00.5", None], pa.timestamp("us")),
        (["2024-03-10", "1999-12-31", None], pa.date32()),
    ],
)
@pytest.mark.parametrize("session", [LA, "UTC", "+05:30"])
def test_the_kernels_and_the_rules_agree_where_the_kernels_run(
    texts: list[str | None], target: pa.DataType, session: str
) -> None:
    column = pa.array(texts, pa.string())
    fast = _fast(column, target, session)
    assert fast is not None, "this shape goes through pyarrow's kernels"
    assert fast.type == target
    assert fast.cast(pa.int64() if target != pa.date32() else pa.int32()).to_pylist() == _slow(
        texts, target, session
    )


@pytest.mark.parametrize(
    ("texts", "target"),
    [
        (["2024-03-10 02:30:00", "2024-03-10 12:00:00"], UTC_US),  # a DST gap in LA
        (["2024-03-10 12:34:56", "2024-03-10T12:34:56Z"], UTC_US),  # mixed
        (["2024-3-1 1:2:3"], UTC_US),
        (["2024-03-10T12:34:56+02:00"], pa.timestamp("us")),  # a zone in a wall time: null
        (["2024-3-1"], pa.date32()),
    ],
)
def test_other_columns_go_value_by_value(texts: list[str], target: pa.DataType) -> None:
    column = pa.array(texts, pa.string())
    assert _fast(column, target, LA) is None
    out = from_text(column, target, LA)
    assert out.type == target
    assert out.cast(pa.int64() if target != pa.date32() else pa.int32()).to_pylist() == _slow(
        texts, target, LA
    )


def test_java_time_rules_for_gaps_overlaps_zones_and_fractions() -> None:
    la = zone(LA)
    assert la is not None
    # 02:30 does not exist on 2024-03-10 in LA: the offset before the gap (-8), so 10:30Z.
    assert instant_micros("2024-03-10T02:30:00", la) == 1710066600000000
    # 01:30 happens twice on 2024-11-03: the earlier offset (-7), so 08:30Z.
    assert instant_micros("2024-11-03 01:30:00", la) == 1730622600000000
    assert instant_micros("2024-03-10T12:34:56.1234567+0530", la) == 1710054296123456
    assert instant_micros("2024-03-10 12:34:56 UTC", la) == 1710074096000000
    assert instant_micros("2024-03-10 12:34:56 GMT+01:00", la) == 1710070496000000
    assert instant_micros("2024-02-30 00:00:00", la) is None
    assert instant_micros("12:34:56", la) is None
    assert wall_micros("2024-03-10") == 1710028800000000
    assert date_days("2024-03-10T10:00:00") == 19792
    assert date_days("nope") is None
    assert zone("PST") is None and zone("Mars/Olympus") is None
    assert from_text(pa.array(["", None]), UTC_US, LA).to_pylist() == [None, None]
