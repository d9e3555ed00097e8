"""The attached CLI's live view (``stoker run --server``, ``stoker run --driver``).

On a terminal a few lines redraw in place (rich): per job its state, attempt, last epoch,
rows/s, backlog and last control event. Anywhere else (a pipe, a log file, a test) nothing
here is drawn: the callers print their plain lines, as before. The renderer is a pure
function of a status dict, so it is tested without a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

# The epochs a rate is measured over: enough to smooth one slow epoch, few enough to follow
# a change of load within seconds.
RATE_EPOCHS = 10


def submitted(outcome: str, state: str, more: str = "") -> str:
    """What a submission did, as the CLI prints it after the id: ``submitted (CREATED)``,
    ``restarted (...)``, ``already live (RUNNING)``, or for the same submission of a job that
    has ended ``already ended (FINISHED): nothing started; --restart runs it again from its
    checkpoint``. ``more``: what else goes in the parentheses (an application's cluster)."""
    said = f"({state}{more})"
    if outcome == "created":
        return f"submitted {said}"
    if outcome == "restarted":
        return f"restarted {said}"
    if state in ("FINISHED", "CANCELED", "FAILED"):
        return f"already ended {said}: nothing started; --restart runs it again from its checkpoint"
    return f"already live {said}"


def job_status(
    view: Mapping[str, Any],
    epochs: Sequence[Mapping[str, Any]],
    control: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """What the live view shows of one job, from its API answers: ``GET /v1/jobs/{id}``, its
    epochs (newest first) and its control events (newest first)."""
    committed = [e for e in epochs if e.get("state") == "COMMITTED"]
    last = committed[0] if committed else None
    attempt = view.get("attempt") or {}
    ev = control[0] if control else None
    return {
        "job_id": view.get("job_id"),
        "state": view.get("state"),
        "attempt": attempt.get("attempt") if isinstance(attempt, Mapping) else None,
        "epoch": last.get("epoch") if last else None,
        "rows": last.get("rows") if last else None,
        "rows_per_s": rows_per_second(committed[:RATE_EPOCHS]),
        "backlog": last.get("backlog") if last else None,
        "control": None
        if ev is None
        else {
            "kind": ev.get("kind"),
            "status": ev.get("status"),
            "applied_epoch": ev.get("applied_epoch"),
        },
        "error": view.get("last_error"),
    }


def rows_per_second(epochs: Iterable[Mapping[str, Any]]) -> float | None:
    """Rows over the wall time the epochs span (first pinned to last committed); None
    without two timestamps to measure between."""
    rows, start, end = 0, None, None
    for e in epochs:
        rows += int(e.get("rows") or 0)
        pinned, done = e.get("pinned_at"), e.get("committed_at")
        if pinned is not None:
            start = pinned if start is None else min(start, pinned)
        if done is not None:
            end = done if end is None else max(end, done)
    if start is None or end is None or end <= start:
        return None
    return rows / (end - start)


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:,.0f}k{unit}"
    return f"{value:,.0f}{unit}" if value >= 10 else f"{value:.1f}{unit}"


def render_status(status: Mapping[str, Any]) -> str:
    """One job's line of the live view, e.g. ``orders  RUNNING  attempt 1  epoch 42 (1,200
    rows)  850 rows/s  backlog 0  control config APPLIED@41``."""
    parts = [str(status.get("job_id") or "?"), str(status.get("state") or "?")]
    if status.get("attempt"):
        parts.append(f"attempt {status['attempt']}")
    epoch = status.get("epoch")
    if epoch is None:
        parts.append("no epoch yet")
    else:
        rows = status.get("rows")
        parts.append(f"epoch {epoch}" + ("" if rows is None else f" ({rows:,} rows)"))
    parts.append(f"{_num(status.get('rows_per_s'))} rows/s")
    parts.append(f"backlog {_num(status.get('backlog'))}")
    ev = status.get("control")
    if ev:
        at = f"@{ev['applied_epoch']}" if ev.get("applied_epoch") is not None else ""
        parts.append(f"control {ev.get('kind')} {ev.get('status')}{at}")
    line = "  ".join(parts)
    if status.get("error"):
        line += f"\n  error: {status['error']}"
    return line


def render_view(title: str, statuses: Sequence[Mapping[str, Any]]) -> str:
    """The whole live view: a title line, then a line per job."""
    lines = [title] + [render_status(s) for s in statuses]
    return "\n".join(lines)


def live_wanted(stream: Any = None) -> bool:
    """Whether to draw the live view: only on a terminal (the progress goes to stderr)."""
    s = sys.stderr if stream is None else stream
    return bool(getattr(s, "isatty", lambda: False)())


class LiveView:
    """A redrawn block on stderr while attached; :meth:`say` prints a line above it. Used
    only on a terminal (:func:`live_wanted`)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self._live = Live(console=self.console, auto_refresh=False, transient=False)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live.__exit__(exc_type, exc, tb)

    def update(self, text: str) -> None:
        from rich.text import Text

        self._live.update(Text(text), refresh=True)

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)


def backlog_line(epoch: Mapping[str, Any]) -> str | None:
    """What the sources had beyond an epoch's end, for ``stoker status``: the total, and where
    a source has partitions (Kafka), those behind, the furthest first (``90 (orders/0 63,
    orders/1 27)``); None when the epoch recorded none."""
    total = epoch.get("backlog")
    if total is None:
        return None
    parts: dict[str, int] = {}
    left_out = 0
    for src in (epoch.get("progress") or {}).get("sources") or []:
        parts.update({str(k): int(v) for k, v in (src.get("partitions") or {}).items()})
        left_out += int(src.get("partitionsLeftOut") or 0)
    behind = sorted(((n, p) for p, n in parts.items() if n > 0), key=lambda x: (-x[0], x[1]))
    if not behind:
        return f"{int(total):,}"
    shown = ", ".join(f"{p} {n:,}" for n, p in behind[:8])
    more = max(0, len(behind) - 8) + left_out
    return f"{int(total):,} ({shown}{f', {more} more' if more > 0 else ''})"
