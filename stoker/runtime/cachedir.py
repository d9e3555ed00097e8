"""Where stoker keeps what it makes once per machine for its driver JVMs (the class archive of
runtime/jvmcache.py, the Hadoop classes of runtime/hadoop_local.py): ``STOKER_CACHE_DIR``, else
``$XDG_CACHE_HOME/stoker``, else ``~/.cache/stoker``; in ``jvm/``. And the JDK's tools both
make them with."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def cache_dir() -> Path:
    given = os.environ.get("STOKER_CACHE_DIR")
    if given:
        return Path(given) / "jvm"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "stoker" / "jvm"


def jdk_tool(name: str) -> Path | None:
    """The JDK's ``name`` (``java``, ``javac``): ``$JAVA_HOME/bin/<name>``, else the one on
    ``PATH``, resolved; None when neither names one (the caller checks that it exists)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / name) if home else shutil.which(name)
    return Path(found).resolve() if found else None
