"""The checker: what must hold at the end of every schedule, read from the sinks, the store,
PostgreSQL's prepared transactions and the process table, as a user or an operator reads them.

- every input id exactly once in every sink (none lost, none twice), across every job id
  of the run (a restore from a savepoint starts a new job on the same sinks);
- nothing left prepared in PostgreSQL, nothing staged in a files sink, no PREPARED sink
  transaction and no epoch short of COMMITTED in the store, for every job of the run;
- each job in the state it ends in: one stopped with a savepoint FINISHED at the savepoint's
  epoch, the job restored from it going on at the next epoch with the same uid; the last job
  FINISHED (CANCELED for an unbounded workload);
- one driver deciding for a job at a time: epochs decided in the order of their attempts;
- control versions strictly increasing, epochs' pinned versions never going back, and no
  REJECTED pause or config in effect;
- no process of the run left behind (on a cluster: no executor of the run once its driver
  ended; the runner then stops the cluster and checks that nothing of it is left);
- nothing else the runner found on the way (:attr:`Run.problems`);
- after a wall-clock step or skew (``clock_step``, ``clock_skew``), whose leases are judged
  on each observer's monotonic clock: no attempt of any job ended with its lease expired (or
  lapsed), and no manager lost the leader lease, unless a fault that freezes or kills a
  driver, a manager or the store was injected too; and when every fault injected was a clock
  fault or one that fails nothing (control events, files arriving), no failure counted for
  any job and no attempt FAILED.
"""

from __future__ import annotations

import functools
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


CLOCK_FAULTS = {"clock_step", "clock_skew"}
# Faults that stop a lease's renewals for real: a driver or manager frozen or killed, the
# store's server down. After any of them an attempt may rightly end with its lease expired.
LEASE_BREAKERS = {
    "driver_stall",
    "jvm_stall",
    "driver_kill",
    "checkpoint_lost",
    "leader_kill",
    "manager_stall",
    "standby_kill",
    "standby_stall",
    "pg_down",
    "partition",  # the driver cut off a store on PostgreSQL renews nothing either
}
# Faults that fail no attempt: with only these and clock faults, no failure may be counted.
QUIET = CLOCK_FAULTS | {
    "pause",
    "config",
    "rate_limit",
    "trigger",
    "log_level",
    "checkpoint",
    "event",
    "savepoint",
    "files_arrive",
}
LEASE_ENDED = ("the lease of attempt", "lease of attempt")  # reconciler; the driver's fence


def _check_clocks(run: Run, v: Verdict) -> None:
    """What a wall-clock step must not change (issue 39 item 1): see the module's doc."""
    done = {k for k, n in run.injected.items() if n}
    if not done & CLOCK_FAULTS or done & LEASE_BREAKERS:
        return
    quiet = done <= QUIET

    def look(st: Any) -> list[tuple[str, int, list[Any]]]:
        return [(j, int(st.get_job(j).failures), st.list_attempts(j)) for j in run.jobs]

    seen = run.read(look)
    if seen is None:
        v.add("store: the attempts could not be read at the end")
        return
    for jid, failures, attempts in seen:
        for a in attempts:
            if a.error and any(s in a.error for s in LEASE_ENDED):
                v.add(
                    f"clock: attempt {a.attempt} of {jid} ended with its lease gone after "
                    f"clock faults only ({sorted(done)}): {a.error}"
                )
            elif quiet and str(a.state) == "FAILED":
                v.add(f"clock: attempt {a.attempt} of {jid} FAILED ({sorted(done)}): {a.error}")
        if quiet and failures:
            v.add(f"clock: job {jid} counted {failures} failures ({sorted(done)})")
    for log in sorted(run.base.glob("manager-*.log")):
        text = log.read_text(errors="replace")
        if "lost the leader lease" in text:
            line = next(x for x in text.splitlines() if "lost the leader lease" in x)
            v.add(f"clock: {log.stem} lost the leader lease ({sorted(done)}): {line[:300]}")


def check(run: Run) -> Verdict:
    from tests.support import wait_for
    from tests.support.sinks import file_sink_ids, pg_ids, pg_prepared

    v = Verdict()
    w = run.schedule.workload
    for what in run.op.unexpected:
        v.add(f"a driver ended with an exit code no fault explains: {what}")
    want = run.expected_ids()
    try:
        _once("files sink", file_sink_ids(run.out), want, v)
    except Exception as e:  # an empty or torn file in a committed epoch (a power loss)
        v.add(f"files sink: a committed file cannot be read: {type(e).__name__}: {e}")
    staging = run.out / "_staging"
    if staging.exists() and any(staging.iterdir()):
        v.add(f"files sink: staged parts left {sorted(p.name for p in staging.iterdir())[:5]}")
    if w.pg_sink:
        _once("postgres sink", pg_ids(run.sink_dsn, "ids"), want, v)
        left = pg_prepared(run.sink_dsn)
        if left:
            v.add(f"postgres sink: {len(left)} transactions left prepared {left[:3]}")

    for what in run.problems:
        v.add(what)
    for i, jid in enumerate(run.jobs):
        last = i == len(run.jobs) - 1
        expected = ("FINISHED" if w.bounded else "CANCELED") if last else "FINISHED"
        _check_job(run, jid, expected, v)
    _check_switches(run, v)
    _check_clocks(run, v)
    check_zombies(run, v)
    # Processes: the last driver has exited; its JVM and workers go with it (give them a moment).
    try:
        wait_for("no process of the run left", lambda: not processes_of(run.marker), 30)
    except AssertionError:
        v.add(f"processes left behind: {processes_of(run.marker)}")
    return v


def _check_job(run: Run, jid: str, expected: str, v: Verdict) -> None:
    """One job of the run, as the store holds it at the end."""
    from stoker.types import ControlKind, ControlStatus, EpochState, TxnState

    def look(st: Any) -> dict[str, Any]:
        return {
            "job": st.get_job(jid),
            "epochs": st.list_epochs(jid, 100_000),
            "txns": st.list_txns(jid, TxnState.PREPARED),
            "controls": st.list_controls(jid, limit=100_000),
            "snapshot": st.control_snapshot(jid),
        }

    seen = run.read(look)
    if seen is None:
        v.add(f"store: job {jid} could not be read at the end")
        return
    if str(seen["job"].state) != expected:
        v.add(f"job {jid} is {seen['job'].state}, expected {expected}: {seen['job'].last_error}")
    epochs = seen["epochs"]
    newest = max((e.epoch for e in epochs), default=None)
    short = [
        (int(e.epoch), str(e.state))
        for e in epochs
        if e.state != EpochState.COMMITTED
        # The epoch in flight when the job's last driver died (killed just before a cancel):
        # pinned, never decided, its parts rolled back by the resolution (checked above); a
        # restart of the job replays it under the same number.
        and not (e.state == EpochState.PINNED and e.epoch == newest and seen["job"].state.terminal)
    ]
    if short:
        v.add(f"store: epochs of {jid} not COMMITTED {short[:5]}")
    # One writer at a time (issue 39 item 8, a driver cut off while another takes its job
    # over): epochs are decided in the order of the attempts that decided them. An attempt
    # deciding an epoch after a newer attempt decided an earlier one is two drivers committing
    # for one job.
    decided = sorted((int(e.epoch), int(e.decided_by)) for e in epochs if e.decided_by is not None)
    back = [(a, b) for a, b in itertools.pairwise(decided) if b[1] < a[1]]
    if back:
        v.add(
            f"store: {jid}: an older attempt decided after a newer one (epoch, attempt) {back[:3]}"
        )
    if seen["txns"]:
        v.add(f"store: sink transactions of {jid} still PREPARED {seen['txns'][:3]}")
    _control_checks(seen, v, ControlKind, ControlStatus)


def check_zombies(run: Run, v: Verdict) -> None:
    """A driver frozen inside the protocol and woken after another attempt took its job over
    (``zombie``): it stopped with an error, decided nothing after it froze (a freeze before
    its decide: not that epoch either), and no part of its own was committed for an epoch it
    did not decide (its parts were rolled back: nothing prepared or staged is left, above)."""
    from stoker.types import TxnState

    for z in run.zombies:
        if z.rc is None or z.rc == 0:
            v.add(f"zombie driver {z.pid} of {z.job} (attempt {z.attempt}) ended rc {z.rc}")
        first = z.epoch if z.point == "after_prepare" else z.epoch + 1

        def look(st: Any, z: Any = z) -> tuple[list[Any], list[Any]]:
            return st.list_epochs(z.job, 100_000), st.list_txns(z.job, TxnState.COMMITTED)

        seen = run.read(look)
        if seen is None:
            v.add(f"store: the epochs of {z.job} could not be read for zombie {z.pid}")
            continue
        epochs, txns = seen
        decided = sorted(
            int(e.epoch) for e in epochs if e.decided_by == z.attempt and e.epoch >= first
        )
        if decided:
            v.add(
                f"zombie: attempt {z.attempt} of {z.job}, frozen at {z.point} of epoch {z.epoch} "
                f"and woken after attempt {z.by} took over, decided epochs {decided[:8]}"
            )
        by = {int(e.epoch): e.decided_by for e in epochs}
        kept = sorted(
            (int(x.epoch), x.sink)
            for x in txns
            if x.attempt == z.attempt and by.get(int(x.epoch)) != z.attempt
        )
        if kept:
            v.add(f"zombie: parts of attempt {z.attempt} of {z.job} committed undecided {kept[:5]}")


def _check_switches(run: Run, v: Verdict) -> None:
    """Across each stop-with-savepoint and restore: the old job ended at the savepoint's
    epoch, the new one began at the next with the old one's uid."""

    from stoker.types import EpochState

    def look(st: Any, jid: str) -> tuple[str, list[int]]:
        epochs = sorted(st.list_epochs(jid, 100_000), key=lambda e: int(e.epoch))
        # An epoch pinned by a driver that died, never decided (no output), may trail the
        # savepoint's: the savepoint is taken at Spark's last commit before it is run again
        # (runtime/savepoint.py allows exactly that), and it stays with the ended job.
        if epochs and epochs[-1].state == EpochState.PINNED:
            epochs.pop()
        return str(st.get_job(jid).uid), [int(e.epoch) for e in epochs]

    restored_at = {s.new: s.cut for s in run.switches}
    for s in run.switches:
        old = run.read(functools.partial(look, jid=s.old))
        new = run.read(functools.partial(look, jid=s.new))
        if old is None or new is None:
            v.add(f"store: {s.old} or {s.new} could not be read at the end")
            continue
        # A job restored at epoch N and stopped with a savepoint before its first epoch has
        # none of its own: its savepoint is at N, the epoch it was restored at (run J, seed 82).
        if not old[1] and restored_at.get(s.old) == s.cut:
            pass
        elif not old[1] or old[1][-1] != s.cut:
            v.add(f"{s.old} stopped with a savepoint at epoch {s.cut}, its last is {old[1][-1:]}")
        # The next epoch after the cut, past the batches a state repartition of the new job
        # took before its first epoch (Spark's repartition writes a batch of its own).
        first = s.cut + 1
        while first in run.repartition_batches.get(s.new, []):
            first += 1
        if new[1] and new[1][0] != first:
            v.add(f"{s.new} restored from epoch {s.cut} began at epoch {new[1][0]}")
        if old[0] != new[0]:
            v.add(f"{s.new} has uid {new[0]}, its savepoint's job {s.old} {old[0]}")


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
