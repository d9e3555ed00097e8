"""A Structured Streaming program run by stoker without being ported, refused where it starts
its own query.

``stoker run spark_app.py`` of a program written for Spark alone (``writeStream ... start()``,
``awaitTermination()``) used to run it as it is: Spark started, the query ran under its own
checkpoint, with none of stoker's guarantees, and nothing said it was not a stoker job. While a
user's file runs under stoker, a streaming query the file starts itself is refused at that
call, naming the line and what replaces it; stoker's own queries (started from its package)
are not touched.

A file that does not use stoker at all is refused before it runs (:func:`refuse_unported_file`,
read from its source): otherwise Spark starts first, and its start-up lines bury the refusal.
"""

from __future__ import annotations

import ast
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
    "sources.kafka, sources.socket, or sources.spark(format, ...) for Spark's own replayable "
    "ones such as rate), the output to p.sink(...), the DataFrame code to "
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


def refuse_unported_file(app: Path) -> None:
    """Refuse ``app`` before anything of it runs when its source starts a streaming query of
    its own (``writeStream ... start()``/``toTable()``) and never imports stoker: a program
    written for Spark alone. A file that imports stoker is run, and a query it starts itself is
    refused at that call (:func:`own_queries_refused`). Nothing is said of a file that cannot be
    read or parsed: running it says that better."""
    try:
        tree = ast.parse(app.read_text(encoding="utf-8"), filename=str(app))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return
    nodes = list(ast.walk(tree))
    if any(_imports_stoker(n) for n in nodes):
        return
    if not any(isinstance(n, ast.Attribute) and n.attr == "writeStream" for n in nodes):
        return
    starts = [
        n.func
        for n in nodes
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in _STARTS
        and _chain_has_write_stream(n.func.value)
    ]
    if not starts:
        return
    first = min(starts, key=lambda f: (f.end_lineno or f.lineno, f.col_offset))
    raise UnportedProgram(
        "app",
        f"{app}:{first.end_lineno or first.lineno} starts a Spark streaming query itself "
        f"(writeStream...{first.attr}()) and does not use stoker; nothing of it ran: {HOW}",
    )


def _imports_stoker(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "stoker" or a.name.startswith("stoker.") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        mod = node.module or ""
        return node.level == 0 and (mod == "stoker" or mod.startswith("stoker."))
    return False


def _chain_has_write_stream(node: ast.AST) -> bool:
    """Whether the call chain ending at ``node`` passes through ``.writeStream``
    (``df.writeStream.format(...).option(...)``), or ends at a name (a writer kept in a
    variable: ``w = df.writeStream...; w.start()``)."""
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr == "writeStream":
                return True
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return isinstance(node, ast.Name)
