"""Checks of an application file's path, shared by the CLI, the job manager and the driver.

No Spark here: the manager and the CLI import it before any pipeline code runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from stoker.errors import InvalidInput


def not_a_python_file(path: str | Path) -> str:
    """Why ``path`` is refused as an application file: it is no ``.py`` file."""
    return f"{str(path)!r} is not a Python file (.py)"


def check_app_path(path: str | Path, field: str = "app") -> Path:
    """The resolved path of a readable ``.py`` file, or :class:`InvalidInput` naming why not."""
    p = Path(path)
    try:
        if not p.exists():
            raise InvalidInput(field, f"{str(path)!r} does not exist")
        if not p.is_file() or p.suffix != ".py":
            raise InvalidInput(field, not_a_python_file(path))
        if not os.access(p, os.R_OK):
            raise InvalidInput(field, f"{str(path)!r} is not readable")
        return p.resolve()
    except OSError as e:  # a name too long, a loop of links: the system's own refusal
        raise InvalidInput(field, f"{str(path)[:200]!r} cannot be used: {e.strerror}") from None


__all__ = ["check_app_path", "not_a_python_file"]
