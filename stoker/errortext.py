"""A job's error, cut to what its user acts on.

A failure in a Spark task reaches stoker as text: PySpark's message, a Java exception's, with
the Python worker's traceback inside it (``PythonException: ... Traceback (most recent call
last): File "...", line N, in f ... ValueError: boom``) and often Spark's logical plan after
it. :func:`summarize` finds in that text the user's exception (``ValueError: boom``) and the
innermost frame of the user's own code (not pyspark's, py4j's or stoker's); the CLI shows
those first, and the whole text only when asked (``--verbose``; the log has it too); the job
manager's web UI lists them per attempt (its exception history).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
# Words a wrapper puts before the error it carries: the one line keeps what comes before them
# ("job 'x' failed: ") and puts the user's exception in their place.
_WRAPPERS = (
    "An exception was thrown from the Python worker",
    "[PYTHON_EXCEPTION]",
    "Job aborted due to stage failure",
    "org.apache.spark.",
    "py4j.",
    "pyspark.",
    _TRACEBACK,
)
# Path parts of code that is not the user's: Spark's Python side, the Java gateway, stoker.
_LIBRARY_PARTS = frozenset({"pyspark", "py4j", "stoker", "cloudpickle"})
_STOKER_DIR = str(Path(__file__).resolve().parent)
MAX_LINE = 400
# A text without a traceback is one of stoker's own messages (or a line it carries): it ends
# with what to do, so it is shown whole up to this bound.
MAX_PLAIN_LINE = 4000


DEBUG_ENV = "STOKER_DEBUG"


def debug_requested() -> bool:
    """Whether everything is asked for (``STOKER_DEBUG`` set to other than empty, 0, false or
    no; the CLI's ``--debug`` sets it): whole tracebacks, and Spark's own lines kept."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Frame:
    """One frame of a Python traceback: where the code runs and its source line."""

    path: str
    line: int
    function: str
    source: str | None

    def where(self) -> str:
        """``path, line N, in f``."""
        return f"{self.path}, line {self.line}, in {self.function}"


@dataclass(frozen=True)
class ErrorSummary:
    """What an error text says, in the order a user reads it."""

    exception: str  # "ValueError: boom", else the text's first meaningful line
    frame: Frame | None  # the innermost frame of the user's code, when there is a traceback
    lead: str  # what the text says before the error it carries ("job 'x' failed: ")
    traced: bool = True  # the text carries a traceback (else: a message, shown whole)

    @property
    def limit(self) -> int:
        return MAX_LINE if self.traced else MAX_PLAIN_LINE

    def one_line(self) -> str:
        """``lead`` + the exception + where the user's code raised it, on one line."""
        line = f"{self.lead}{self.exception}"
        if self.frame is not None:
            line += f" (at {self.frame.where()})"
        return line if len(line) <= self.limit else line[: self.limit - 3] + "..."


def is_library(path: str) -> bool:
    """Whether a frame's ``path`` is pyspark's, py4j's or stoker's code (or Python's own
    ``<string>``-like pseudo files), not the user's."""
    if path.startswith("<") or path.startswith(_STOKER_DIR):
        return True
    return any(part in _LIBRARY_PARTS for part in Path(path).parts[:-1])


def _last_traceback(lines: list[str]) -> tuple[list[Frame], str | None]:
    """The frames and the exception line of the last Python traceback in ``lines`` (a chained
    exception's last is the one raised)."""
    starts = [i for i, ln in enumerate(lines) if ln.strip().endswith(_TRACEBACK)]
    if not starts:
        return [], None
    frames: list[Frame] = []
    i = starts[-1] + 1
    while i < len(lines):
        m = _FRAME.match(lines[i])
        if m is not None:
            source = None
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if nxt.startswith((" ", "\t")) and _FRAME.match(nxt) is None:
                source = nxt.strip()
                i += 1
            frames.append(Frame(m["path"], int(m["line"]), m["fn"], source))
        elif lines[i].strip() and not lines[i].startswith((" ", "\t")):
            return frames, lines[i].strip()  # the first line not indented: the exception
        i += 1
    return frames, None


def _lead(first: str) -> str:
    """The part of the text's first line before any wrapper's words."""
    cut = min((at for w in _WRAPPERS if (at := first.find(w)) >= 0), default=-1)
    return first[:cut] if cut >= 0 else ""


def summarize(text: str) -> ErrorSummary:
    """The user's exception, the innermost frame of their code and the lead of an error's
    ``text`` (see the module's docstring). Without a traceback: the first meaningful line (a
    line ending in ':' joined to the next), no frame."""
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    meaningful = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("at ")]
    if not meaningful:
        return ErrorSummary("no error text", None, "")
    frames, exception = _last_traceback(lines)
    if exception is None:
        first = meaningful[0]
        if first.endswith(":") and len(meaningful) > 1:
            first = f"{first} {meaningful[1]}"
        return ErrorSummary(first, None, "", traced=False)
    mine = [f for f in frames if not is_library(f.path)]
    return ErrorSummary(exception, mine[-1] if mine else None, _lead(meaningful[0]))


def one_line(text: str) -> str:
    """An error's ``text`` on one line: the user's exception and where their code raised it
    first (:func:`summarize`)."""
    return summarize(text).one_line()


def status_lines(text: str, verbose: bool, label: str = "error") -> list[str]:
    """An error as ``stoker status`` shows it: the user's exception, then where their code
    raised it (its source line too); with ``verbose`` the whole text after them, else a line
    saying how to see it."""
    s = summarize(text)
    exception = s.exception if len(s.exception) <= s.limit else s.exception[: s.limit] + "..."
    out = [f"{label:<10} {exception}"]
    if s.frame is not None:
        src = f": {s.frame.source}" if s.frame.source else ""
        out.append(f"  at       {s.frame.where()}{src}")
    if verbose:
        out.append("  whole error:")
        out.extend(f"    {ln}" for ln in text.strip().splitlines())
    elif text.strip() != exception:
        out.append("  (the whole error: --verbose)")
    return out


__all__ = ["ErrorSummary", "Frame", "is_library", "one_line", "status_lines", "summarize"]
