"""The job page's dashboard: the query as its operators with their figures,
back pressure, and the exception history; read from the store through the job manager.

The figures are Spark's ``StreamingQueryProgress``, summarized by the driver with each epoch
(:mod:`stoker.runtime.progress_summary`, stored as the epoch's ``progress``): the manager
never runs Spark. Plain dicts for the templates; no HTML here.
"""

from __future__ import annotations

from typing import Any

from stoker.errortext import summarize
from stoker.manager import JobManager
from stoker.redact import redact_answer, redact_text
from stoker.store import EpochRecord

# The keys the templates read, None where an epoch's progress lacks one.
_OPERATOR_KEYS = (
    "operatorName",
    "numRowsTotal",
    "numRowsUpdated",
    "numRowsRemoved",
    "numRowsDroppedByWatermark",
    "memoryUsedBytes",
    "stateSizeBytes",
    "allUpdatesTimeMs",
    "allRemovalsTimeMs",
    "commitTimeMs",
    "numShufflePartitions",
)
_SOURCE_KEYS = (
    "description",
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
    "backlog",  # beyond the epoch's end, and a partitioned source's by partition
    "partitions",
    "partitionsLeftOut",
)
PROGRESS_EPOCHS = 30  # the newest epochs looked at for one with a progress recorded
EXCEPTIONS_SHOWN = 20


def _newest_with_progress(epochs: list[EpochRecord]) -> EpochRecord | None:
    return next((e for e in epochs if e.progress), None)


def state_totals(progress: dict[str, Any] | None) -> dict[str, Any]:
    """An epoch's state over its stateful operators: rows, memory, size (None: none known)."""
    ops = (progress or {}).get("stateOperators") or []

    def total(key: str) -> Any:
        values = [op[key] for op in ops if isinstance(op.get(key), int | float)]
        return sum(values) if values else None

    return {
        "rows": total("numRowsTotal"),
        "memory": total("memoryUsedBytes"),
        "size": total("stateSizeBytes"),
    }


def job_operators(manager: JobManager, jid: str) -> dict[str, Any]:
    """The query as a chain of operators, from its newest epoch with a progress: its sources
    (rows, rates), its stateful operators (state rows, memory, size, times), its sink (rows
    in, stoker's write and commit); and back pressure: the rate the sources offered against
    the rate the query processed, and the backlog beyond the epoch."""
    epochs = manager.epochs(jid, PROGRESS_EPOCHS)
    e = _newest_with_progress(epochs)
    if e is None:
        return {"epoch": None, "sources": [], "operators": [], "sink": None, "pressure": None}
    p = redact_answer(e.progress or {})
    offered = p.get("inputRowsPerSecond")
    processed = p.get("processedRowsPerSecond")
    behind = falling_behind(epochs)
    return {
        "epoch": e.epoch,
        "sources": _rows(p.get("sources"), _SOURCE_KEYS),
        "operators": _rows(p.get("stateOperators"), _OPERATOR_KEYS),
        "sink": {
            "description": (p.get("sink") or {}).get("description") or "stoker's sinks",
            "rows": e.rows_in,
            "work_ms": e.work_ms,
        },
        "phases": p.get("durationMs") or {},
        "watermark": p.get("watermark"),
        "pressure": {
            "offered": offered,
            "processed": processed,
            "backlog": e.backlog,
            "behind": behind,
        },
    }


BEHIND_EPOCHS = 10  # the newest epochs with rates that judge back pressure
BEHIND_LEAST = 3  # fewer than this: not judged


def falling_behind(epochs: list[EpochRecord]) -> bool | None:
    """Whether the sources offer more than the query processes, judged over the newest
    epochs with rates (newest first), not one: one epoch's rates swing (the one after a pause
    or a restart "offers" its whole gap). Behind when most of them offered more than they
    processed and the backlog, where the sources report one, did not shrink over them; None
    when fewer than :data:`BEHIND_LEAST` epochs have rates."""
    rated: list[tuple[float, float, EpochRecord]] = []
    for e in epochs:
        p = e.progress or {}
        offered, processed = p.get("inputRowsPerSecond"), p.get("processedRowsPerSecond")
        if isinstance(offered, int | float) and isinstance(processed, int | float) and processed:
            rated.append((float(offered), float(processed), e))
        if len(rated) == BEHIND_EPOCHS:
            break
    if len(rated) < BEHIND_LEAST:
        return None
    over = sum(offered > processed for offered, processed, _ in rated)
    if 2 * over <= len(rated):
        return False
    newest, oldest = rated[0][2].backlog, rated[-1][2].backlog
    return not (newest is not None and oldest is not None and newest < oldest)


def _rows(value: Any, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    items = value if isinstance(value, list) else []
    return [{k: item.get(k) for k in keys} for item in items if isinstance(item, dict)]


def job_exceptions(manager: JobManager, jid: str) -> dict[str, Any]:
    """Every attempt that ended with an error, newest first: the user's exception (its first
    line) and where their code raised it (file, line, function and source line), as the CLI's
    ``stoker status`` shows it; the whole text is the attempt's log."""
    rows = []
    for a in reversed(manager.attempts(jid)):
        if not a.error:
            continue
        s = summarize(redact_text(a.error))
        rows.append(
            {
                "attempt": a.attempt,
                "state": str(a.state),
                "ended_at": a.ended_at,
                "exception": s.exception,
                "where": s.frame.where() if s.frame else None,
                "source": s.frame.source if s.frame else None,
                "lead": s.lead.strip().rstrip(":"),
            }
        )
        if len(rows) >= EXCEPTIONS_SHOWN:
            break
    return {"exceptions": rows}


__all__ = ["job_exceptions", "job_operators", "state_totals"]
