"""A file sink: every epoch becomes one folder ``<path>/epoch=<N>``, made visible by a rename.

Tasks write into ``<path>/_staging/epoch=<N>.attempt=<A>`` (Spark and most readers skip names
that start with '_'). Commit writes ``_manifest.json`` into that folder and renames it into
place: one atomic step, so a reader of ``<path>`` sees an epoch whole or not at all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import SinkError
from stoker.sinks.base import Decision, Prepared, Recovered
from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FORMATS = ("parquet", "json", "csv", "orc")
_STAGED = re.compile(r"^epoch=(\d+)\.attempt=(\d+)$")
MANIFEST = "_manifest.json"


_FOOTER_COUNTED = ("parquet", "orc")


def _footer_rows(folder: Path, fmt: str) -> int:
    """Rows in the data files of ``folder``, read from their footers (no data is read)."""
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(p).metadata.num_rows for p in files)
    import pyarrow.orc as po

    return sum(po.ORCFile(p).nrows for p in files)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class FilesSink:
    """Exactly-once files of ``format`` under ``path``, one folder per committed epoch."""

    path: str
    format: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"files:{self.path}"
        self._root = Path(self.path).resolve()
        self._job: JobId | None = None

    def describe(self) -> str:
        return f"files({self.path!r}, format={self.format!r})"

    # layout --------------------------------------------------------------------------------
    @property
    def staging(self) -> Path:
        return self._root / "_staging"

    def _staged(self, epoch: Epoch, attempt: AttemptNo) -> Path:
        return self.staging / f"epoch={epoch}.attempt={attempt}"

    def final(self, epoch: Epoch) -> Path:
        return self._root / f"epoch={epoch}"

    # protocol ------------------------------------------------------------------------------
    def validate(self) -> None:
        if self.format not in FORMATS:
            raise SinkError(
                "files.format", f"unknown format {self.format!r}; use one of {', '.join(FORMATS)}"
            )
        root = self._root
        probe = root if root.exists() else root.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if root.exists() and not root.is_dir():
            raise SinkError("files.path", f"output path {str(root)!r} exists and is not a folder")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise SinkError("files.path", f"output folder {str(root)!r} is not writable")

    def open(self, job_id: JobId, state_dir: Path) -> None:
        self._job = job_id
        self.staging.mkdir(parents=True, exist_ok=True)

    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        target = self._staged(epoch, attempt)
        if self.format in _FOOTER_COUNTED:
            # Spark's own writer: tasks write their files, its job commit puts them in `target`.
            # The row count comes from the files' footers afterwards (about 1 ms): counting in
            # the Spark job with an Observation cost 15-50 ms per epoch (docs/benchmarks.md).
            self._writer(df).save(str(target))
            return Prepared(rows=_footer_rows(target, self.format), detail={"staged": str(target)})
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        obs = Observation(f"stoker_rows_{epoch}_{attempt}")
        self._writer(df.observe(obs, F.count(F.lit(1)).alias("rows"))).save(str(target))
        rows = int(obs.get.get("rows", 0))
        return Prepared(rows=rows, detail={"staged": str(target)})

    def _writer(self, df: DataFrame) -> Any:
        return df.write.format(self.format).options(**self.options).mode("overwrite")

    def commit(self, epoch: Epoch, attempt: AttemptNo) -> None:
        final = self.final(epoch)
        staged = self._staged(epoch, attempt)
        if final.exists():
            return  # committed before (a replay or a recovery): nothing to do
        if not staged.exists():
            raise SinkError(
                "files", f"epoch {epoch} was decided for attempt {attempt} but {staged} is missing"
            )
        files = sorted(p.name for p in staged.iterdir() if not p.name.startswith((".", "_")))
        manifest: dict[str, Any] = {
            "job_id": self._job,
            "epoch": epoch,
            "attempt": attempt,
            "format": self.format,
            "files": files,
        }
        mpath = staged / MANIFEST
        with open(mpath, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh)
            fh.flush()
            os.fsync(fh.fileno())
        # The commit: one rename. Before it the epoch is invisible, after it whole.
        os.rename(staged, final)
        _fsync_dir(self._root)

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        shutil.rmtree(self._staged(epoch, attempt), ignore_errors=True)

    def recover(self, decision: Decision) -> Recovered:
        done = Recovered()
        if not self.staging.exists():
            return done
        for entry in sorted(self.staging.iterdir()):
            m = _STAGED.match(entry.name)
            if not m:
                continue
            epoch, attempt = Epoch(int(m.group(1))), AttemptNo(int(m.group(2)))
            if decision(epoch) == attempt and not self.final(epoch).exists():
                self.commit(epoch, attempt)
                done.committed.append((epoch, attempt))
            else:
                self.abort(epoch, attempt)
                done.aborted.append((epoch, attempt))
        return done
