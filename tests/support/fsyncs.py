"""Which paths a piece of code fsyncs, and when it renames: the real calls still run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


class FsyncLog:
    """Records every ``os.fsync`` (as the path of its file descriptor) and ``os.rename``, in
    order, while passing each call on to the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str]] = []
        real_fsync, real_rename = os.fsync, os.rename

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            real_fsync(fd)

        def rename(src: str | Path, dst: str | Path) -> None:
            self.events.append(("rename", f"{src} -> {dst}"))
            real_rename(src, dst)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "rename", rename)

    def synced(self) -> set[str]:
        return {path for what, path in self.events if what == "fsync"}

    def before_rename(self) -> set[str]:
        """The paths fsynced before the first rename."""
        out: set[str] = set()
        for what, path in self.events:
            if what == "rename":
                return out
            out.add(path)
        return out


def everything_under(folder: Path) -> set[str]:
    """``folder`` and every file and folder below it, as absolute paths."""
    return {str(folder)} | {str(p) for p in folder.rglob("*")}
