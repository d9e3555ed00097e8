"""Driver logs: one attempt's of a job, or of an application, read from the file its driver
wrote (a job's: the last ``tail`` bytes; an application's: the last ``tail`` lines)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import BinaryIO

from stoker.errors import ApplicationNotFound, InvalidInput, JobNotFound
from stoker.logformat import job_tag
from stoker.manager.applications import app_record
from stoker.manager.jobs import job_record
from stoker.store import Store
from stoker.types import AttemptNo, JobId

# A driver's log is read from its end: at most this much when no tail is asked for (a log of
# hundreds of MB read whole took 150 s and 964 MB of the manager's memory), at most
# LOG_TAIL_MAX when one is.
LOG_TAIL_DEFAULT = 1 << 20
LOG_TAIL_MAX = 16 << 20


def attempt_log(store: Store, jid: str, attempt: int, tail: int | None = None) -> str:
    """The driver log of one attempt of a job: its last ``tail`` lines, or (no ``tail``) its
    last ``LOG_TAIL_DEFAULT`` bytes; never more than ``LOG_TAIL_MAX`` bytes, and from a line
    start (a line cut in its middle could show a secret's value without the key that has it
    masked)."""
    job = job_record(store, jid)
    att = store.get_attempt(job.job_id, AttemptNo(attempt))
    if att is None:
        raise JobNotFound(f"{jid} attempt {attempt}")
    if not att.log_path and job.app_id is not None and att.app_attempt is not None:
        return _job_of_application(store, job.job_id, job.app_id, att.app_attempt, tail)
    if not att.log_path:
        raise InvalidInput("attempt", f"attempt {attempt} was not started by a job manager")
    return tail_lines(served_log(att.log_path, job.job_id, attempt), tail)


def _job_of_application(
    store: Store, jid: str, app_id: JobId, app_attempt: int, tail: int | None
) -> str:
    """A job of an application has no driver of its own: its view is its lines of the
    application driver's log (the attempt that ran it), those the driver tagged with the job
    (``[<job>]`` in text, ``"job"`` in JSON lines) with what continues them (a traceback).
    Spark's own lines name no job and are left out: ``stoker app logs`` has them."""
    att = store.get_attempt(app_id, AttemptNo(app_attempt))
    if att is None or not att.log_path:
        return ""
    path = served_log(att.log_path, app_id, app_attempt)
    text = tail_lines(path, None, budget=LOG_TAIL_MAX)  # the view is cut from this much
    kept = job_lines(text, jid)
    if tail is not None:
        return "".join(kept[-tail:])
    out, size = [], 0
    for line in reversed(kept):  # the last LOG_TAIL_DEFAULT bytes of the view, whole lines
        size += len(line.encode("utf-8", errors="replace"))
        if size > LOG_TAIL_DEFAULT:
            break
        out.append(line)
    return "".join(reversed(out))


# Where a record of stoker's begins: a text line's date and time, or a JSON object.
_RECORD = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}|\d{2}/\d{2}/\d{2} |\{)")


def job_lines(text: str, jid: str) -> list[str]:
    """The lines of ``text`` (an application driver's log) logged for job ``jid``, each with
    the lines that continue it (a line that does not start a record: a traceback's)."""
    tag = f" {job_tag(jid)} "
    kept: list[str] = []
    keeping = False
    for line in text.splitlines(keepends=True):
        if _RECORD.match(line):
            keeping = _is_for(line, tag, jid)
        if keeping:
            kept.append(line)
    return kept


def _is_for(line: str, tag: str, jid: str) -> bool:
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and record.get("job") == jid
    # "<date> <time> [<job>] <logger>: ...": the tag right after the time.
    head = line.split(" ", 2)
    return len(head) == 3 and f" {head[2]}".startswith(tag)


def application_log(
    store: Store, app_id: str, attempt: int | None = None, tail: int | None = None
) -> str:
    """The driver log of one attempt of an application (default: the current one), or its
    last ``tail`` lines; empty before the first attempt started."""
    app = app_record(store, app_id)
    n = app.current_attempt if attempt is None else attempt
    if n == 0:
        return ""
    att = store.get_attempt(app.job_id, AttemptNo(n))
    if att is None:
        err = ApplicationNotFound(app.job_id)
        raise err.with_message(f"application {app.job_id!r} has no attempt {n}")
    if not att.log_path:
        return ""
    return tail_lines(served_log(att.log_path, app.job_id, n), tail)


def served_log(recorded: str, jid: str, attempt: int) -> Path:
    """The log file an attempt's record names, if it is one a job manager writes
    (``<state dir>/logs/<id>/attempt-<n>.log``, absolute, no ``..``, no symbolic link on the
    way): a driver holds the store's credentials and could record any path, and the API would
    serve that file. :class:`InvalidInput` on ``attempt`` otherwise."""
    path = Path(recorded)
    shaped = (
        path.is_absolute()
        and ".." not in path.parts
        and path.name == f"attempt-{attempt}.log"
        and path.parent.name == jid
        and path.parent.parent.name == "logs"
    )
    try:
        plain = shaped and path.parent.resolve() == path.parent
    except (OSError, RuntimeError):
        plain = False
    if not plain:
        raise InvalidInput(
            "attempt",
            f"attempt {attempt}'s recorded log is not where a job manager writes logs: not served",
        )
    return path


def _open_log(path: Path) -> BinaryIO:
    """``path`` opened for reading, refusing a symbolic link in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    return os.fdopen(fd, "rb")


def tail_lines(path: Path, lines: int | None, budget: int | None = None) -> str:
    """The end of a log: its last ``lines`` lines, or (None) its last ``LOG_TAIL_DEFAULT``
    bytes (``budget``, when given); at most ``LOG_TAIL_MAX`` bytes either way, from a line
    start. Read from the end, so a long log costs what is shown (a 300 MB log read whole took
    150 s and 964 MB)."""
    if not path.exists():
        return ""
    if budget is None:
        budget = LOG_TAIL_DEFAULT if lines is None else LOG_TAIL_MAX
    budget = min(budget, LOG_TAIL_MAX)
    with _open_log(path) as fh:
        end = fh.seek(0, os.SEEK_END)
        pos, data = end, b""
        # One more newline than asked for: the file's own last newline ends the last line.
        while pos > 0 and end - pos < budget and (lines is None or data.count(b"\n") <= lines):
            step = min(64 * 1024, pos, budget - (end - pos))
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    if pos > 0:
        cut = data.find(b"\n")  # the partial first line goes
        data = b"" if cut < 0 else data[cut + 1 :]
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""
    return data.decode("utf-8", errors="replace")
