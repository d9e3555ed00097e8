"""What a source is to the runtime: a spec that validates itself and opens a streaming DataFrame."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stoker.errors import InvalidSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Every offset of a stoker source carries these two keys: which source of the pipeline wrote it
# ("sid"), and whether the source has reached the end of a bounded input ("finished").
SID = "sid"
FINISHED = "finished"


@dataclass(frozen=True)
class SourceContext:
    """What the runner knows when it opens a source: the job and where its store is.

    A source whose reader writes beside the checkpoint (the file log) uses it to check, from
    the reader's own process, that its driver still owns the job.

    ``pace_s``: when every source of the job is stoker's, the query runs at trigger 0 and the
    readers pace epochs at the job's interval (this one, or the one control set since), so a
    new interval is a control version like any other, with no query restart. None: Spark's
    trigger paces.
    """

    job_id: str
    store_url: str
    pace_s: float | None = None


class Source(Protocol):
    """A pipeline input. ``bounded`` sources finish; unbounded ones never do."""

    @property
    def bounded(self) -> bool:
        """True when the source ends (it then finishes the job's final epoch)."""
        ...

    def describe(self) -> str:
        """One line naming the source for messages and the job spec."""
        ...

    def validate(self) -> None:
        """Raise :class:`~stoker.errors.InvalidSource` if the source cannot be read."""
        ...

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        """A streaming DataFrame over this source, its offsets tagged with ``sid``."""
        ...


MapFn = Callable[["DataFrame"], "DataFrame"]


def parse_offset_line(line: str) -> dict[str, Any] | None:
    """One source's line of a Spark offset log file, as a dict if it is a stoker offset."""
    line = line.strip()
    if not line or line == "-":
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if isinstance(value, dict) and SID in value and FINISHED in value:
        return value
    return None


# How a source's reader process or task reports bad input to the driver: its exception's
# traceback line inside the query's error (the reader runs in a process of Spark's).
_RAISED = re.compile(
    r"stoker\.errors\.InvalidSource: (?P<field>[\w.\[\]'\"-]+): (?P<message>[^\n]*)"
)


def invalid_source_in(text: str) -> InvalidSource | None:
    """The :class:`~stoker.errors.InvalidSource` a source raised in one of Spark's processes
    (a missing topic, records lost to retention), found in the query's error ``text``; None
    if there is none. Bad input is not retried: the job ends with exit 2."""
    m = _RAISED.search(text)
    if m is None:
        return None
    message = re.sub(r"\s+SQLSTATE: \w+\s*$", "", m.group("message")).strip()
    return InvalidSource(m.group("field"), message)
