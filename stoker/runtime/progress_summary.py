"""What Spark's ``StreamingQueryProgress`` says of one epoch, cut to what a dashboard shows,
recorded with the epoch (``Store.set_epoch_metrics(progress=...)``).

The job manager reads it from the store (it never runs Spark): its job page draws the query as
its sources, its stateful operators and its sink with each one's figures, and ``/metrics``
exports the newest epoch's as series. Only plain numbers and short names go in, a bounded
number of each, so a row stays small (``MAX_PROGRESS_BYTES`` in the store).

Spark's fields, as its progress names them:

- ``numInputRows``, ``inputRowsPerSecond`` (rows over the time since the previous epoch
  began: the rate the sources offer) and ``processedRowsPerSecond`` (rows over this epoch's
  time: the rate the query keeps up with); the first falling behind the second's ceiling is
  back pressure;
- ``durationMs``: the epoch's time by phase (``latestOffset``, ``queryPlanning``,
  ``addBatch``: the transform and the sinks, ``walCommit``, ``commitOffsets``...);
- per source: its description, rows and rates;
- per stateful operator (``stateOperators``): its rows in state (``numRowsTotal``), updated
  and removed this epoch, dropped as late by the watermark, the time spent updating,
  removing and committing its state, its memory (``memoryUsedBytes``), and its state store's
  size (the HDFS-backed store's ``stateOnCurrentVersionSizeBytes``; RocksDB's files on disk,
  ``rocksdbSstFileSize``) when Spark reports one;
- the watermark, when the query has one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

MAX_OPERATORS = 16
MAX_SOURCES = 8
MAX_PHASES = 12
MAX_NAME = 120  # characters of a source's description or an operator's name

# stateOperators' figures kept, by Spark's names.
_STATE_FIELDS = (
    "numRowsTotal",
    "numRowsUpdated",
    "numRowsRemoved",
    "numRowsDroppedByWatermark",
    "allUpdatesTimeMs",
    "allRemovalsTimeMs",
    "commitTimeMs",
    "memoryUsedBytes",
    "numShufflePartitions",
    "numStateStoreInstances",
)
# The state store's size, by provider: the HDFS-backed one's (its current version's maps)
# and RocksDB's files on disk.
_SIZE_METRICS = ("stateOnCurrentVersionSizeBytes", "rocksdbSstFileSize")


def _number(value: Any) -> float | int | None:
    """A figure as a JSON number; None for a missing, negative (Spark's -1: unknown), NaN or
    non-numeric one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value < 0 or value in (float("inf"), float("-inf")):
        return None
    return round(value, 3) if isinstance(value, float) else value


# A source Spark describes by its object's toString: its class and hash code.
_OBJECT = re.compile(r"^(?:[\w$]+\.)*(?P<cls>[\w$]+)@[0-9a-f]+$")


def _name(value: Any) -> str:
    text = str(value or "")
    if (m := _OBJECT.match(text)) is not None:
        text = m["cls"]  # PythonMicroBatchStream...@65e08260: the class's own name
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 3] + "..."


def _figures(doc: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {f: n for f in fields if (n := _number(doc.get(f))) is not None}


def summarize(progress: Mapping[str, Any], names: Sequence[str] = ()) -> dict[str, Any]:
    """The summary of one epoch's progress (see the module's docstring): a JSON object.

    ``names``: the pipeline's sources as stoker describes them (``generator(...)``,
    ``files(...)``), in the order they are unioned, which is the order Spark lists them in;
    used for the sources' descriptions when there are as many (Spark describes a Python data
    source by its stream's class alone), Spark's kept beside."""
    out: dict[str, Any] = _figures(
        progress, ("numInputRows", "inputRowsPerSecond", "processedRowsPerSecond")
    )
    durations = progress.get("durationMs")
    if isinstance(durations, Mapping):
        phases = {str(k): n for k, v in durations.items() if (n := _number(v)) is not None}
        out["durationMs"] = dict(sorted(phases.items())[:MAX_PHASES])
    sources = [s for s in progress.get("sources") or [] if isinstance(s, Mapping)]
    out["sources"] = [
        {
            "description": _name(s.get("description")),
            **_figures(s, ("numInputRows", "inputRowsPerSecond", "processedRowsPerSecond")),
        }
        for s in sources[:MAX_SOURCES]
    ]
    if names and len(names) == len(sources) <= MAX_SOURCES:
        for entry, name in zip(out["sources"], names, strict=True):
            entry["spark"], entry["description"] = entry["description"], _name(name)
    operators = [o for o in progress.get("stateOperators") or [] if isinstance(o, Mapping)]
    out["stateOperators"] = [_operator(o) for o in operators[:MAX_OPERATORS]]
    sink = progress.get("sink")
    if isinstance(sink, Mapping):
        out["sink"] = {"description": _name(sink.get("description"))}
    watermark = (progress.get("eventTime") or {}).get("watermark")
    if isinstance(watermark, str):
        out["watermark"] = _name(watermark)
    return out


def _operator(op: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"operatorName": _name(op.get("operatorName")) or "stateful"}
    out.update(_figures(op, _STATE_FIELDS))
    custom = op.get("customMetrics")
    if isinstance(custom, Mapping):
        for key in _SIZE_METRICS:
            if (n := _number(custom.get(key))) is not None:
                out["stateSizeBytes"] = n
                out["stateSizeMetric"] = key
                break
    return out


__all__ = ["MAX_OPERATORS", "MAX_SOURCES", "summarize"]
