"""A Structured Streaming program run by stoker without being ported, refused where it starts
its own query.

``stoker run spark_app.py`` of a program written for Spark alone (``writeStream ... start()``,
``awaitTermination()``) used to run it as it is: Spark started, the query ran under its own
checkpoint, with none of stoker's guarantees, and nothing said it was not a stoker job. While a
user's file runs under stoker, a streaming query the file starts itself is refused at that
call, naming the line and what replaces it; stoker's own queries (started from its package)
are not touched.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput

_PACKAGE = str(Path(__file__).resolve().parents[1])
_STARTS = ("start", "toTable")

HOW = (
    "under stoker the query is stoker's: give the input to p.source(...) (sources.files, "
    "sources.kafka, sources.socket, ...), the output to p.sink(...), the DataFrame code to "
    "p.stream(...) or p.transform(...), and call stoker.run(p) instead of start() and "
    "awaitTermination() (README: 'From a Structured Streaming job'); examples/spark_ports/ "
    "has three of Spark's examples ported"
)


class UnportedProgram(InvalidInput):
    """The user's file started a Spark streaming query itself."""


def _refusing(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        filename = caller.f_code.co_filename
        if filename.startswith(_PACKAGE):
            return original(self, *args, **kwargs)
        raise UnportedProgram(
            "app",
            f"{filename}:{caller.f_lineno} starts a Spark streaming query itself "
            f"(writeStream...{name}()): {HOW}",
        )

    return start


@contextlib.contextmanager
def own_queries_refused() -> Iterator[None]:
    """While the block runs, ``DataStreamWriter.start``/``toTable`` called from outside stoker
    raise :class:`UnportedProgram`."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    saved = {name: DataStreamWriter.__dict__[name] for name in _STARTS}
    for name, original in saved.items():
        setattr(DataStreamWriter, name, _refusing(name, original))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(DataStreamWriter, name, original)
