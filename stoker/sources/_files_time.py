"""A file source's date and time columns, read as Spark's own file sources read them.

JSON lines and CSV hold dates and times as text. Spark reads a ``timestamp`` (an instant)
written without a zone as a local time of the session's time zone
(``spark.sql.session.timeZone``), one with a zone (``Z``, ``+02:00``, ``+0530``, ``UTC``,
``Europe/Paris``) as that instant; a local time the zone skips (a DST gap) takes the offset
before the gap, one it repeats (an overlap) the earlier offset (``java.time``'s rules, which
Python's ``zoneinfo`` with ``fold=0`` shares). A ``timestamp_ntz`` is the wall time as written
(null when it names a zone); a ``date`` takes the date part. Text Spark cannot read is null.
Fractions beyond microseconds are cut off.

The common shapes are converted by pyarrow's kernels (a column of ISO times all without a
zone, or all with ``Z``/``+hh:mm``; a column of ``yyyy-mm-dd`` dates); any other column, and
one pyarrow refuses (a time in a DST gap), value by value here, by the same rules.

A time leaves here as microseconds since the epoch in UTC (``timestamp[us, UTC]``) or as a
naive wall time (``timestamp[us]``): the Arrow types pyspark's Python data sources hand to the
JVM (``to_arrow_schema(..., timezone="UTC")``). Parquet holds typed values: a timestamp there is
an instant (a naive one is taken as UTC, as Spark does), so it is only cast.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

_EPOCH = dt.datetime(1970, 1, 1)
_US = dt.timedelta(microseconds=1)

# Spark's stringToTimestamp: [y]yyy-[m]m-[d]d, then optionally ' ' or 'T' and
# [h]h:[m]m[:[s]s[.fraction]], then optionally a zone (directly or after spaces).
_TEXT = re.compile(
    r"^\s*(?P<y>\d{4})(?:-(?P<mo>\d{1,2})(?:-(?P<d>\d{1,2}))?)?"
    r"(?:(?:[ T](?P<h>\d{1,2}):(?P<mi>\d{1,2})(?::(?P<s>\d{1,2})(?:\.(?P<f>\d*))?)?)?"
    r"\s*(?P<z>[A-Za-z+\-][A-Za-z0-9_+\-:/]*)?)?\s*$"
)
_OFFSET = re.compile(r"^(?P<sign>[+-])(?P<h>\d{1,2})(?::?(?P<m>\d{2})(?::?(?P<s>\d{2}))?)?$")
_PREFIXED = re.compile(r"^(?:UTC|GMT|UT)(?P<rest>[+-].*)?$")
_DATE_TEXT = re.compile(r"^\s*(?P<y>\d{4})(?:-(?P<mo>\d{1,2})(?:-(?P<d>\d{1,2}))?)?(?:[ T].*)?$")

# The shapes pyarrow's cast reads exactly as Spark does.
_FAST_NAIVE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
_FAST_ZONED = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
_FAST_DATE = r"^\d{4}-\d{2}-\d{2}$"


def zone(name: str) -> dt.tzinfo | None:
    """A zone as Spark (java.time) names them: ``Z``, ``+hh[:mm]``, ``UTC``/``GMT``/``UT``
    with or without an offset, or a region (``Europe/Paris``); None for anything else."""
    if name == "Z":
        return dt.UTC
    m = _PREFIXED.match(name)
    if m is not None:
        return _fixed(m.group("rest")) if m.group("rest") else dt.UTC
    if name[0] in "+-":
        return _fixed(name)
    if "/" not in name:
        return None  # java.time's short ids (PST, ...) are left unread
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        return None


def _fixed(text: str) -> dt.tzinfo | None:
    m = _OFFSET.match(text)
    if m is None:
        return None
    h, mi, s = int(m.group("h")), int(m.group("m") or 0), int(m.group("s") or 0)
    if h > 18 or mi > 59 or s > 59:
        return None
    delta = dt.timedelta(hours=h, minutes=mi, seconds=s)
    return dt.timezone(-delta if m.group("sign") == "-" else delta)


def _wall(m: re.Match[str]) -> dt.datetime | None:
    """The wall time the text names (no zone applied); None for an impossible one."""
    frac = (m.group("f") or "")[:6].ljust(6, "0")
    try:
        return dt.datetime(
            int(m.group("y")),
            int(m.group("mo") or 1),
            int(m.group("d") or 1),
            int(m.group("h") or 0),
            int(m.group("mi") or 0),
            int(m.group("s") or 0),
            int(frac),
        )
    except ValueError:
        return None


def instant_micros(text: str, session: dt.tzinfo) -> int | None:
    """A ``timestamp``'s text as microseconds since the epoch (UTC); None when Spark reads
    null. Without a zone in the text, a local time of ``session``."""
    m = _TEXT.match(text)
    if m is None:
        return None
    wall = _wall(m)
    if wall is None:
        return None
    tz = session if m.group("z") is None else zone(m.group("z"))
    if tz is None:
        return None
    offset = wall.replace(tzinfo=tz).utcoffset() or dt.timedelta(0)  # fold=0: java's choice
    return (wall - _EPOCH) // _US - offset // _US


def wall_micros(text: str) -> int | None:
    """A ``timestamp_ntz``'s text as microseconds of its wall time; None with a zone."""
    m = _TEXT.match(text)
    if m is None or m.group("z") is not None:
        return None
    wall = _wall(m)
    return None if wall is None else (wall - _EPOCH) // _US


def date_days(text: str) -> int | None:
    """A ``date``'s text as days since the epoch: its ``yyyy-[m]m-[d]d`` part."""
    m = _DATE_TEXT.match(text)
    if m is None:
        return None
    try:
        day = dt.date(int(m.group("y")), int(m.group("mo") or 1), int(m.group("d") or 1))
    except ValueError:
        return None
    return (day - _EPOCH.date()).days


def is_temporal(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_timestamp(t) or pa.types.is_date32(t)


def from_text(column: Any, target: pa.DataType, session_zone: str) -> pa.Array:
    """A text column (JSON, CSV) as ``target`` (``timestamp[us, UTC]``, ``timestamp[us]`` or
    ``date32``), read in the session's zone ``session_zone``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    fast = _fast(texts, target, session_zone)
    if fast is not None:
        return fast
    values = texts.to_pylist()
    if pa.types.is_date32(target):
        return pa.array([None if v is None else date_days(v) for v in values], pa.int32()).cast(
            target
        )
    if target.tz is None:
        micros = [None if v is None else wall_micros(v) for v in values]
    else:
        session = zone(session_zone)
        if session is None:
            raise ValueError(f"unknown session time zone {session_zone!r}")
        micros = [None if v is None else instant_micros(v, session) for v in values]
    return pa.array(micros, pa.int64()).cast(target)


def _fast(texts: pa.Array, target: pa.DataType, session_zone: str) -> pa.Array | None:
    """The column through pyarrow's kernels when its shape allows; None otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def all_match(pattern: str) -> bool:
        return bool(pc.all(pc.match_substring_regex(texts, pattern), skip_nulls=True).as_py())

    try:
        if pa.types.is_date32(target):
            return texts.cast(target) if all_match(_FAST_DATE) else None
        if all_match(_FAST_NAIVE):
            naive = texts.cast(pa.timestamp("us"))
            if target.tz is None:
                return naive
            local = pc.assume_timezone(
                naive, timezone=session_zone, ambiguous="earliest", nonexistent="raise"
            )
            return local.cast(target)
        if target.tz is not None and all_match(_FAST_ZONED):
            return texts.cast(target)
    except (pa.ArrowException, ValueError):
        return None  # a time in a DST gap, a zone name pyarrow lacks: value by value
    return None


def cast_typed(column: Any, target: pa.DataType) -> Any:
    """A Parquet column to ``target``: a naive timestamp is UTC (as Spark reads it), an aware
    one converted; nanoseconds cut to microseconds."""
    import pyarrow.compute as pc

    return pc.cast(column, target, safe=False)
