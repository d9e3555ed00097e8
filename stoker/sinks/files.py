"""A file sink: every epoch becomes one folder ``<path>/epoch=<N>``, made visible by a rename.

Tasks write into ``<path>/_staging/epoch=<N>.attempt=<A>.owner=<uid>`` (Spark and most readers
skip names that start with '_'). Commit writes ``_manifest.json`` (job id, uid, epoch, attempt,
files) into that folder and renames it into place: one atomic step, so a reader of ``<path>``
sees an epoch whole or not at all.

The folder belongs to one job (``<path>/_stoker_owner.json``, see :mod:`._files_owner`): another
job is refused at ``validate``, and an ``epoch=N`` folder or a staged folder is only ever taken
for this job's when its manifest or name says so.

In ``output_mode='complete'`` every epoch is a whole snapshot and ``<path>/current`` names
the newest (:mod:`._files_current`); ``update`` is refused.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._files_current import check_mode, publish
from stoker.sinks._files_owner import (
    MANIFEST,
    STAGED,
    check_uid,
    claim_folder,
    epoch_folders,
    fsync_dir,
    fsync_tree,
    legacy_content,
    manifest_is,
    manifest_owner,
    read_claim,
    read_manifest,
    refusal,
)
from stoker.sinks.base import Decision, Prepared, Recovered, SinkOwner
from stoker.types import AttemptNo, Epoch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("stoker.sinks.files")

FORMATS = ("parquet", "json", "csv", "orc")


_FOOTER_COUNTED = ("parquet", "orc")


def _footer_rows(folder: Path, fmt: str) -> int:
    """Rows in the data files of ``folder``, read from their footers (no data is read)."""
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(p).metadata.num_rows for p in files)
    import pyarrow.orc as po

    return sum(po.ORCFile(p).nrows for p in files)


def _resumes(state_dir: Path) -> bool:
    """Whether the job resumes from its own state: its Spark checkpoint exists, so it goes on
    from its last epoch instead of numbering epochs from 0 again (runtime/job/attempt_run.py)."""
    return (state_dir / "checkpoint").is_dir()


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
        self._owner: SinkOwner | None = None
        self._mode = "append"

    def describe(self) -> str:
        return f"files({self.path!r}, format={self.format!r})"

    def descriptor(self) -> dict[str, Any]:
        # Options only shape what Spark writes; commit, abort and recover do not need them
        # (and they may hold credentials of an object store).
        return {
            "kind": "files",
            "path": str(self._root),
            "format": self.format,
            "name": self.name,
            "output_mode": self._mode,
        }

    def accept_output_mode(self, mode: str) -> None:
        """``append``: one folder per epoch. ``complete``: those folders are snapshots, and
        ``<path>/current`` names the newest. ``update``: refused (InvalidSink)."""
        check_mode(mode)
        self._mode = mode

    # layout --------------------------------------------------------------------------------
    @property
    def staging(self) -> Path:
        return self._root / "_staging"

    def _staged(self, epoch: Epoch, attempt: AttemptNo) -> Path:
        return self.staging / f"epoch={epoch}.attempt={attempt}.owner={self._bound().uid}"

    def _staged_before_markers(self, epoch: Epoch, attempt: AttemptNo) -> Path:
        """Where a version without owner markers staged (epoch, attempt). No version that
        knows markers makes such a name, so in a folder this job owns it is this job's."""
        return self.staging / f"epoch={epoch}.attempt={attempt}"

    def final(self, epoch: Epoch) -> Path:
        return self._root / f"epoch={epoch}"

    def _bound(self) -> SinkOwner:
        if self._owner is None:
            raise SinkError("files", f"{self.describe()} is used before open()")
        return self._owner

    # protocol ------------------------------------------------------------------------------
    def validate(self, owner: SinkOwner) -> None:
        if self.format not in FORMATS:
            raise InvalidSink(
                "files.format", f"unknown format {self.format!r}; use one of {', '.join(FORMATS)}"
            )
        check_uid(owner)
        root = self._root
        probe = root if root.exists() else root.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if root.exists() and not root.is_dir():
            raise InvalidSink("files.path", f"output path {str(root)!r} exists and is not a folder")
        if not probe.is_dir():  # before Spark starts, not "No such file or directory" later
            raise InvalidSink(
                "files.path",
                f"output folder {str(root)!r} cannot be made: {str(probe)!r} is a file, "
                "not a folder",
            )
        if not os.access(probe, os.W_OK | os.X_OK):
            raise InvalidSink("files.path", f"output folder {str(root)!r} is not writable")
        if root.is_dir():
            self._check_owner(owner)

    def _check_owner(self, owner: SinkOwner) -> None:
        """Refuse a folder that is another job's: by its marker, or (no marker) by its outputs."""
        claim = read_claim(self._root)
        if claim is not None:
            if not claim.owned_by(owner):
                raise refusal(self._root, claim, owner)
            return
        other = legacy_content(self._root).foreign(owner)
        if other is not None:
            raise InvalidSink(
                "files.path",
                f"output folder {str(self._root)!r} holds outputs of another job ({other}); "
                f"job {owner.job_id!r} cannot write to it: choose another path, or delete the "
                "folder (the committed epochs in it go with it) to start over",
            )

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        """Claim the folder for ``owner`` (or find it ours), then make the staging folder."""
        check_uid(owner)
        root = self._root
        root.mkdir(parents=True, exist_ok=True)
        claim = read_claim(root)
        if claim is None:
            self._check_owner(owner)
            legacy = legacy_content(root)
            if legacy.epochs and not _resumes(state_dir):
                raise InvalidSink(
                    "files.path",
                    f"output folder {str(root)!r} holds epochs of job {owner.job_id!r} written "
                    "by a stoker version without owner markers, and this job starts from a "
                    f"fresh state folder ({str(state_dir)!r}): it would write epochs 0.. "
                    "again. Resume the job from its old state folder, choose another path, "
                    "or delete the folder to start over",
                )
            claim = claim_folder(root, owner, adopted=bool(legacy))
            if claim.owned_by(owner) and claim.adopted:
                log.warning("%s: adopted outputs written before owner markers", self.name)
        if not claim.owned_by(owner):
            raise refusal(root, claim, owner)  # lost the race to another job
        self._owner = owner
        self.staging.mkdir(parents=True, exist_ok=True)

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        """The ``epoch=N`` folders of job uid ``owner.uid``: their manifest names that uid (or,
        written before uids, that job id). A folder without a readable manifest counts too:
        stoker's commit never makes one, and it would refuse to write that epoch over it. A
        folder whose owner marker names another uid holds none of this uid's epochs."""
        claim = read_claim(self._root)
        if claim is not None and claim.uid != owner.uid:
            return []
        return sorted(
            Epoch(n)
            for n, manifest in epoch_folders(self._root).items()
            if manifest is None
            or manifest.get("uid") == owner.uid
            or ("uid" not in manifest and manifest.get("job_id") == owner.job_id)
        )

    def _still_ours(self) -> SinkOwner:
        """The folder's marker still names this job (it was not deleted and claimed anew)."""
        owner = self._bound()
        claim = read_claim(self._root)
        if claim is None or not claim.owned_by(owner):
            raise SinkError(
                "files.path",
                f"output folder {str(self._root)!r} is no longer job {owner.job_id!r}'s: its "
                "owner marker "
                + ("is gone" if claim is None else f"names {claim.describe()}")
                + "; nothing more is written to it",
            )
        return owner

    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        self._still_ours()
        target = self._staged(epoch, attempt)
        if self.format in _FOOTER_COUNTED:
            # Spark's own writer: tasks write their files, its job commit puts them in `target`.
            # The row count comes from the files' footers afterwards (about 1 ms): counting in
            # the Spark job with an Observation cost 15-50 ms per epoch (docs/benchmarks.md).
            self._writer(df).save(str(target))
            self._make_durable(target)
            return Prepared(rows=_footer_rows(target, self.format), detail={"staged": str(target)})
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        obs = Observation(f"stoker_rows_{epoch}_{attempt}")
        self._writer(df.observe(obs, F.count(F.lit(1)).alias("rows"))).save(str(target))
        self._make_durable(target)
        rows = int(obs.get.get("rows", 0))
        return Prepared(rows=rows, detail={"staged": str(target)})

    def _make_durable(self, target: Path) -> None:
        """A prepared part is on disk before the epoch's decision: Spark's writer leaves its
        files in the page cache, and after a power loss a decided (then committed) epoch could
        hold empty or truncated files. Each file, the staged folder and its entry in
        ``_staging`` are fsynced (cost per epoch: docs/benchmarks.md, section 14)."""
        fsync_tree(target)
        fsync_dir(target.parent)

    def _writer(self, df: DataFrame) -> Any:
        return df.write.format(self.format).options(**self.options).mode("overwrite")

    def _committed(self, epoch: Epoch, attempt: AttemptNo) -> bool:
        """Whether ``epoch=N`` is in place as this job's part of (epoch, attempt).

        A folder of another job, uid or attempt is never taken for ours: it is an error."""
        owner = self._bound()
        final = self.final(epoch)
        if not final.exists():
            return False
        manifest = read_manifest(final)
        if manifest_is(manifest, owner, attempt):
            return True
        raise SinkError(
            "files",
            f"epoch {epoch} of job {owner.job_id!r} was decided for attempt {attempt}, but "
            f"{final} holds {manifest_owner(manifest)}: something else writes into this "
            "job's output folder; stoker does not overwrite it (stop that writer, or move the "
            "job to another path)",
        )

    def commit(
        self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any] | None = None
    ) -> None:
        # `detail` (the recorded {"staged": ...}) is not needed: the staged folder's name says
        # whose part it is.
        if self._committed(epoch, attempt):
            # Committed before (a replay or a recovery); a crash may have come before the
            # swap of the current snapshot.
            self._publish(epoch)
            return
        owner = self._still_ours()
        staged = self._staged(epoch, attempt)
        older = self._staged_before_markers(epoch, attempt)
        if not staged.exists() and older.exists():
            staged = older
        if not staged.exists():
            raise SinkError(
                "files", f"epoch {epoch} was decided for attempt {attempt} but {staged} is missing"
            )
        files = sorted(p.name for p in staged.iterdir() if not p.name.startswith((".", "_")))
        manifest: dict[str, Any] = {
            "job_id": owner.job_id,
            "uid": owner.uid,
            "epoch": epoch,
            "attempt": attempt,
            "format": self.format,
            "files": files,
        }
        try:
            self._rename_in(staged, manifest, epoch)
        except OSError as e:
            # A full disk, a folder gone read-only: the file system failing, not bad input.
            # The epoch stays decided and its part staged; the next run commits it.
            raise SinkError(
                "files",
                f"epoch {epoch} (decided) could not be published from {staged}: {e}; it is "
                "committed when the job runs again",
            ) from e

    def _rename_in(self, staged: Path, manifest: dict[str, Any], epoch: Epoch) -> None:
        with open(staged / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh)
        # The manifest and the folder's entries. The data files were made durable by prepare;
        # their second fsync finds nothing to write (and covers a part staged by a version of
        # stoker that did not fsync them).
        fsync_tree(staged)
        # The commit: one rename. Before it the epoch is invisible, after it whole. (If another
        # writer made `epoch=N` meanwhile, the rename fails: a folder that is not empty is
        # never replaced.) The rename is durable with the fsync of `<path>`.
        os.rename(staged, self.final(epoch))
        fsync_dir(self._root)
        self._publish(epoch)

    def _publish(self, epoch: Epoch) -> None:
        """Complete mode: point ``current`` at the epoch's snapshot."""
        if self._mode == "complete":
            publish(self._root, epoch)

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        shutil.rmtree(self._staged(epoch, attempt), ignore_errors=True)
        shutil.rmtree(self._staged_before_markers(epoch, attempt), ignore_errors=True)

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        """Publish staged parts the store decided, drop the others: of attempts up to
        ``up_to`` only (a later attempt's staged folder, named by its attempt, is in flight)."""
        done = Recovered()
        if not self.staging.exists():
            return done
        uid = self._bound().uid
        parts: set[tuple[Epoch, AttemptNo]] = set()
        for entry in sorted(self.staging.iterdir()):
            m = STAGED.match(entry.name)
            if not m:
                continue
            if m.group(3) not in (None, uid):
                # Another owner's part (a job that wrote here before the folder was deleted
                # and claimed anew): never this job's to commit or abort.
                log.warning("%s: leaving %s alone, it was not staged by this job", self.name, entry)
                continue
            attempt = AttemptNo(int(m.group(2)))
            if up_to is not None and attempt > up_to:
                continue
            parts.add((Epoch(int(m.group(1))), attempt))
        for epoch, attempt in sorted(parts):
            if decision(epoch) == attempt and not self._committed(epoch, attempt):
                self.commit(epoch, attempt)
                done.committed.append((epoch, attempt))
            else:
                self.abort(epoch, attempt)
                done.aborted.append((epoch, attempt))
        return done
