"""The checker: what must hold at the end of every schedule, read from the sinks, the store,
PostgreSQL's prepared transactions and the process table, as a user or an operator reads them.

- every input id exactly once in every sink (none lost, none twice);
- nothing left prepared in PostgreSQL, nothing staged in a files sink, no PREPARED sink
  transaction and no epoch short of COMMITTED in the store;
- the job in the state its workload ends in (FINISHED, or CANCELED for an unbounded one);
- control versions strictly increasing, epochs' pinned versions never going back, and no
  REJECTED pause or config in effect;
- no process of the run left behind.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.chaos.runner import Run


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, what: str) -> None:
        self.violations.append(what)


def _once(name: str, ids: Counter[int], want: set[int], v: Verdict) -> None:
    twice = sorted(k for k, n in ids.items() if n > 1)
    lost = sorted(want - set(ids))
    extra = sorted(set(ids) - want)
    if twice or lost or extra:
        v.add(
            f"{name}: {len(lost)} lost {lost[:8]}, {len(twice)} twice {twice[:8]}, "
            f"{len(extra)} unexpected {extra[:8]}"
        )


def processes_of(marker: str) -> list[int]:
    """Live processes whose environment carries the run's marker."""
    found = []
    needle = f"STOKER_CHAOS_RUN={marker}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    with open(f"/proc/{name}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                            found.append(int(name))
        except OSError:
            continue
    return found


def check(run: Run) -> Verdict:
    from stoker.types import ControlKind, ControlStatus, EpochState, TxnState
    from tests.support import wait_for
    from tests.support.sinks import file_sink_ids, pg_ids, pg_prepared

    v = Verdict()
    w = run.schedule.workload
    for what in run.op.unexpected:
        v.add(f"a driver ended with an exit code no fault explains: {what}")
    want = run.expected_ids()
    _once("files sink", file_sink_ids(run.out), want, v)
    staging = run.out / "_staging"
    if staging.exists() and any(staging.iterdir()):
        v.add(f"files sink: staged parts left {sorted(p.name for p in staging.iterdir())[:5]}")
    if w.pg_sink:
        _once("postgres sink", pg_ids(run.sink_dsn, "ids"), want, v)
        left = pg_prepared(run.sink_dsn)
        if left:
            v.add(f"postgres sink: {len(left)} transactions left prepared {left[:3]}")

    def look(st: Any) -> dict[str, Any]:
        job = st.get_job(w.job)
        return {
            "job": job,
            "epochs": st.list_epochs(w.job, 100_000),
            "txns": st.list_txns(w.job, TxnState.PREPARED),
            "controls": st.list_controls(w.job, limit=100_000),
            "snapshot": st.control_snapshot(w.job),
        }

    seen = run.read(look)
    if seen is None:
        v.add("store: could not be read at the end")
        return v
    expected_state = "FINISHED" if w.bounded else "CANCELED"
    if str(seen["job"].state) != expected_state:
        v.add(f"job is {seen['job'].state}, expected {expected_state}: {seen['job'].last_error}")
    short = [
        (int(e.epoch), str(e.state)) for e in seen["epochs"] if e.state != EpochState.COMMITTED
    ]
    if short:
        v.add(f"store: epochs not COMMITTED {short[:5]}")
    if seen["txns"]:
        v.add(f"store: sink transactions still PREPARED {seen['txns'][:3]}")
    _control_checks(seen, v, ControlKind, ControlStatus)
    # Processes: the last driver has exited; its JVM and workers go with it (give them a moment).
    try:
        wait_for("no process of the run left", lambda: not processes_of(run.marker), 30)
    except AssertionError:
        v.add(f"processes left behind: {processes_of(run.marker)}")
    return v


def _control_checks(seen: dict[str, Any], v: Verdict, kinds: Any, statuses: Any) -> None:
    controls = sorted(seen["controls"], key=lambda e: int(e.version))
    versions = [int(e.version) for e in controls]
    if len(set(versions)) != len(versions):
        v.add(f"control: two events share a version {versions}")
    pinned = [int(e.control_version) for e in sorted(seen["epochs"], key=lambda e: int(e.epoch))]
    back = [(i, a, b) for i, (a, b) in enumerate(itertools.pairwise(pinned)) if b < a]
    if back:
        v.add(f"control: an epoch pinned an older version than the one before {back[:3]}")
    snap = seen["snapshot"]
    effective = [e for e in controls if e.status != statuses.REJECTED]
    toggles = [e for e in effective if e.kind in (kinds.PAUSE, kinds.RESUME)]
    want_paused = bool(toggles) and toggles[-1].kind == kinds.PAUSE
    if snap.paused != want_paused:
        rejected = [e.control_id for e in controls if e.status == statuses.REJECTED]
        v.add(
            f"control: paused={snap.paused}, the effective events say {want_paused} "
            f"(rejected {rejected})"
        )
    sets = [e for e in effective if e.kind == kinds.CONFIG]
    want_chaos = sets[-1].body.get("set", {}).get("chaos") if sets else 0
    if snap.config.get("chaos") != want_chaos:
        v.add(
            f"control: config chaos={snap.config.get('chaos')}, effective events say {want_chaos}"
        )


def describe_dir(path: Path) -> str:
    return ", ".join(sorted(p.name for p in path.iterdir())) if path.exists() else "-"
