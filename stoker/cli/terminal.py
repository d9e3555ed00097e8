"""Text from a job manager or a store shown on a terminal as text, never as terminal commands.

A job's error, a log line, a job's name or a control event's payload comes from whoever could
submit or write it; an escape sequence in it (``ESC ] 0 ; title BEL``, ``ESC [ 2 J``, a
carriage return that overwrites a line) would act on the operator's terminal. On a terminal,
stdout replaces every control character but tab and newline by its ``\\xNN`` form; error
lines on stderr are cleaned the same way (stoker's own progress line on stderr, and the live
view, which strips control characters itself, are left alone). A pipe or a file gets the
text as it is.
"""

from __future__ import annotations

import io
import re
import sys
from typing import Any, TextIO

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """``text`` with every control character but tab and newline written ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class TerminalSafe(io.TextIOBase):
    """A text stream that writes :func:`clean` text to the stream it wraps."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(clean(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.raw.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.raw.errors

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def protect_stdout() -> None:
    """On a terminal, stdout writes :func:`clean` text from now on."""
    out = sys.stdout
    if out is not None and not isinstance(out, TerminalSafe) and out.isatty():
        sys.stdout = TerminalSafe(out)


__all__ = ["TerminalSafe", "clean", "protect_stdout"]
