"""How stoker's processes log: plain text (default) or JSON lines (``--log-format json``).

A JSON line carries ``ts``, ``level``, ``logger``, ``message`` and, when known, ``job``,
``attempt`` and ``epoch``: the runtime binds them where it knows them (:func:`bind`), so a log
shipper can group a driver's lines by job and epoch without parsing messages. Leaf module:
every layer may import it.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
from typing import Any, TextIO

ENV = "STOKER_LOG_FORMAT"  # how a manager tells the drivers it starts
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(name)s: %(message)s"

# Per thread of work (a job's thread, an epoch's foreachBatch callback); threads that bind
# nothing fall back to the process's binding (a driver of one job binds it for every thread).
_job: contextvars.ContextVar[str | None] = contextvars.ContextVar("stoker_job", default=None)
_attempt: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "stoker_attempt", default=None
)
_epoch: contextvars.ContextVar[int | None] = contextvars.ContextVar("stoker_epoch", default=None)
_process: dict[str, Any] = {}


def check_format(value: str | None, field: str = "--log-format") -> str:
    """``value`` (None: the environment's, else text) if it is a known format."""
    fmt = (value or os.environ.get(ENV) or "text").strip().lower()
    if fmt not in FORMATS:
        from stoker.errors import InvalidInput

        raise InvalidInput(field, f"must be one of {', '.join(FORMATS)}, got {value!r}")
    return fmt


def bind(
    job: str | None, attempt: int | None = None, epoch: int | None = None, *, process: bool = False
) -> None:
    """Name the job, attempt and epoch of what this thread logs from now on. ``process``: also
    for threads that bind nothing (only a process that runs a single job may say so); an
    epoch bound later for the same job updates the process's binding too."""
    _job.set(job)
    _attempt.set(attempt)
    _epoch.set(epoch)
    if process:
        _process.clear()
        _process.update(job=job, attempt=attempt, epoch=epoch)
    elif _process.get("job") == job and job is not None:
        _process.update(attempt=attempt, epoch=epoch)


def context() -> dict[str, Any]:
    """The job, attempt and epoch known here (each None when not)."""
    job = _job.get()
    if job is None:
        return {k: _process.get(k) for k in ("job", "attempt", "epoch")}
    return {"job": job, "attempt": _attempt.get(), "epoch": _epoch.get()}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the exception's traceback, if any, in ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({k: v for k, v in context().items() if v is not None})
        # exc_text first: the redacting filter (stoker.redact) has cleaned it of secrets.
        if record.exc_text:
            out["exc"] = record.exc_text
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``; in a process that runs several jobs (an application's driver), a line
    logged for one of them names it after the time: ``<time> [<job>] <logger>: <message>``,
    so that the application's log says whose each line is and a job's own view can be cut
    out of it (:func:`job_tag`). A driver of one job does not repeat its id on every line."""

    def __init__(self, fmt: str = TEXT_FORMAT, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        job = _job.get()
        if job is None or _process.get("job") is not None:
            return text
        stamp = self.formatTime(record)
        return f"{stamp} {job_tag(job)}{text[len(stamp) :]}" if text.startswith(stamp) else text


def job_tag(job: str) -> str:
    """How a text line logged for ``job`` in a process of several jobs names it."""
    return f"[{job}]"


def configure(
    fmt: str | None = None, level: int = logging.INFO, stream: TextIO | None = None
) -> str:
    """Configure the root logger as ``basicConfig`` would, in ``fmt`` (None: ``STOKER_LOG_FORMAT``,
    else text); the format in force. Sets ``STOKER_LOG_FORMAT`` so child processes (the
    drivers a manager starts) log the same way."""
    chosen = check_format(fmt)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler])
    os.environ[ENV] = chosen
    return chosen


__all__ = [
    "ENV",
    "FORMATS",
    "JsonFormatter",
    "TextFormatter",
    "bind",
    "check_format",
    "configure",
    "context",
    "job_tag",
]
