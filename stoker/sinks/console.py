"""A sink for development: each epoch's rows printed to the driver's stdout, as Spark's console
sink prints them (a ``Batch: N`` header, then the first rows as a table).

Not exactly once, and it says so: the table is made in ``prepare`` (it is recorded with the
prepared transaction, so it is small: ``rows`` rows, cells cut at 20 characters) and printed
at ``commit``, once the epoch is decided. A crash after the print and before the commit is
recorded prints the epoch again when recovery commits it; a replay prints it again. Nothing
is kept outside the store, so recovery has nothing to abort and the sink holds no epochs.

A job manager's driver has no terminal (its stdout is a log file), and a sink that is not
exactly once there would read as if it were: :meth:`ConsoleSink.managed_refusal` refuses it
(at submission and at the driver's start) unless ``allow_under_manager=True``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from stoker.errors import InvalidSink
from stoker.sinks.base import Decision, Prepared, Recovered, SinkOwner
from stoker.types import AttemptNo, Epoch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_RULE = "-" * 43  # as wide as Spark's console sink draws it


@dataclass
class ConsoleSink:
    """Each epoch's first ``rows`` rows printed to the driver's stdout at commit; at least
    once, not exactly once (a replay after a crash prints the epoch again)."""

    rows: int = 20
    truncate: bool | int = True
    allow_under_manager: bool = False
    name: str = "console"
    # False: rebuilt from its descriptor by a job manager's cleanup (or for a sink the
    # pipeline no longer has): the driver's stdout is not there, commit prints nothing.
    echo: bool = True
    _mode: str = field(default="append", init=False, repr=False)
    _printed: set[tuple[int, int]] = field(default_factory=set, init=False, repr=False)

    def describe(self) -> str:
        return (
            f"console(rows={self.rows}, truncate={self.truncate!r}; "
            "at least once, not exactly once)"
        )

    def descriptor(self) -> dict[str, Any]:
        return {
            "kind": "console",
            "name": self.name,
            "rows": self.rows,
            "truncate": self.truncate,
            "allow_under_manager": self.allow_under_manager,
            "output_mode": self._mode,
        }

    def accept_output_mode(self, mode: str) -> None:
        """Every mode prints as Spark's console sink prints it: an epoch's rows, its changed
        rows (``update``) or the whole result (``complete``)."""
        self._mode = mode

    def managed_refusal(self) -> str | None:
        """Why this sink may not run under a job manager; None when the user allowed it."""
        if self.allow_under_manager:
            return None
        return (
            "sinks.console() prints to the driver's stdout and is not exactly once (a replay "
            "after a crash prints an epoch again): it is for development with `stoker run`, "
            "and a job manager's driver has no terminal. Write to sinks.files(...) or "
            "sinks.postgres(...), or pass sinks.console(..., allow_under_manager=True) to run "
            "it anyway (its output goes to the driver's log)"
        )

    def validate(self, owner: SinkOwner) -> None:
        if isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 1:
            raise InvalidSink("console.rows", f"must be an integer >= 1, got {self.rows!r}")
        if not isinstance(self.truncate, bool) and (
            not isinstance(self.truncate, int) or self.truncate < 1
        ):
            raise InvalidSink(
                "console.truncate",
                f"must be True, False or a width >= 1 (characters), got {self.truncate!r}",
            )
        if not isinstance(self.allow_under_manager, bool):
            raise InvalidSink(
                "console.allow_under_manager",
                f"must be True or False, got {self.allow_under_manager!r}",
            )

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        return None

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        return []  # printed lines are not output anyone can read back

    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        rows = df.count()
        # What df.show() prints (pyspark's DataFrame types it as a column access).
        table = str(cast(Any, df)._show_string(self.rows, self.truncate))
        return Prepared(rows=rows, detail={"table": table})

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        # Once per (epoch, attempt) in this process; a new process (a recovery) prints again.
        if not self.echo or (epoch, attempt) in self._printed:
            return
        self._printed.add((epoch, attempt))
        table = str((detail or {}).get("table", ""))
        sys.stdout.write(f"{_RULE}\nBatch: {epoch}\n{_RULE}\n{table}\n")
        sys.stdout.flush()

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        return None  # nothing was written outside the store

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        return Recovered()  # no parts of its own: recovery commits decided epochs through commit
