"""Where stoker keeps what it makes once per machine for its driver JVMs (the class archive of
runtime/jvmcache.py, the Hadoop classes of runtime/hadoop_local.py): ``STOKER_CACHE_DIR``, else
``$XDG_CACHE_HOME/stoker``, else ``~/.cache/stoker``; in ``jvm/``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    given = os.environ.get("STOKER_CACHE_DIR")
    if given:
        return Path(given) / "jvm"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "stoker" / "jvm"
