"""The record of one restore of a savepoint (:class:`SavepointRestore`, migration 0019)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stoker.types import Epoch, JobId


@dataclass(frozen=True)
class SavepointRestore:
    """Savepoint ``savepoint`` (of job ``from_job_id``, uid ``from_uid``, at ``epoch``) was
    restored into job ``job_id`` of uid ``uid``, in state folder ``state_dir`` on the store
    ``store`` (its URL with the password hidden), at ``restored_at``. ``fork``: under a uid of
    its own. ``sinks``: what it writes, each ``{"name", "target"}`` (target: where the sink
    resolved it writes, None when it cannot tell)."""

    savepoint: str
    uid: str
    job_id: JobId
    store: str
    state_dir: str
    from_job_id: JobId
    from_uid: str
    epoch: Epoch | None
    path: str
    fork: bool
    sinks: tuple[dict[str, Any], ...]
    restored_at: float

    @classmethod
    def from_row(cls, r: Any) -> SavepointRestore:
        sinks = json.loads(r[10]) if r[10] else []
        return cls(
            savepoint=str(r[0]),
            uid=str(r[1]),
            job_id=JobId(r[2]),
            store=str(r[3]),
            state_dir=str(r[4]),
            from_job_id=JobId(r[5]),
            from_uid=str(r[6]),
            epoch=None if r[7] is None else Epoch(int(r[7])),
            path=str(r[8]),
            fork=bool(r[9]),
            sinks=tuple(dict(s) for s in sinks if isinstance(s, dict)),
            restored_at=float(r[11]),
        )

    def params(self) -> dict[str, Any]:
        """The insert's parameters."""
        return {
            "savepoint": self.savepoint,
            "uid": self.uid,
            "job_id": self.job_id,
            "store": self.store,
            "state_dir": self.state_dir,
            "from_job_id": self.from_job_id,
            "from_uid": self.from_uid,
            "epoch": self.epoch,
            "path": self.path,
            "fork": 1 if self.fork else 0,
            "sinks": json.dumps(list(self.sinks), sort_keys=True),
            "restored_at": self.restored_at,
        }

    def is_job(self, job_id: str, state_dir: str) -> bool:
        """Whether this restore made the job ``job_id`` running in ``state_dir``: the same
        record (another store or state folder is another record of that id)."""
        return (self.job_id, self.state_dir) == (job_id, state_dir)

    def describe(self) -> str:
        """``job 'b' (uid u, state folder /s, store sqlite:///s/store.db), restored at T``."""
        when = _when(self.restored_at)
        kind = "a fork, " if self.fork else ""
        return (
            f"job {self.job_id!r} ({kind}uid {self.uid}, state folder {self.state_dir}, store "
            f"{self.store}), restored from it at {when}"
        )


def _when(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


__all__ = ["SavepointRestore"]
