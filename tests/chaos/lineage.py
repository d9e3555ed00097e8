"""Savepoint lineage probed under faults (issue 40 item 2): after a ``savepoint_restore``, while
the restored job runs through the schedule's other faults, what an operator may try next with
the same savepoint must be refused, with nothing recorded and nothing written:

- ``restore_twice``: the savepoint restored again, into another job id (a second job would
  write the epochs after it again): refused, exit 2 (422 under the managers), "was restored
  before into"; no record of the second job.
- ``restart_restored``: the savepoint's own job run again with ``--restart`` (its outputs went
  to the restored job): refused, exit 2, "was restored into"; the old job stays FINISHED.
- ``fork_early``: a fork of the savepoint (``--fork``, outputs of its own) while the job it
  was restored into still runs: refused, exit 2, "waits for the job it was restored into".

A probe that is not refused is a problem of the run (:attr:`Run.problems`); the schedule's
other invariants (every id once, nothing prepared or staged) are checked as always at its end,
so a probe that wrote anything fails there too.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import TYPE_CHECKING, Any

from tests.support import REPO, stoker_cmd

if TYPE_CHECKING:
    from tests.chaos.runner import Run, Switch

TIMEOUT = 300.0
LIVE = ("CREATED", "RUNNING", "RESTARTING", "RECONCILING")


def probe(run: Run, kind: str) -> str | None:
    """The probe ``kind`` on the newest savepoint restored; None when none was restored yet
    (or the probe does not apply to this run)."""
    if not run.switches:
        return None
    sw = run.switches[-1]
    if not _restore_recorded(run, sw):
        return None  # the restored job never got as far as recording its restore
    n = sum(e.what.startswith("probe ") for e in run.history) + 1
    if kind == "restore_twice":
        said = _restore_twice(run, sw, n)
    elif kind == "restart_restored":
        said = _restart_restored(run, sw)
    else:
        said = _fork_early(run, sw, n)
    if said is not None:
        run.log(f"probe {kind}: {said}")
    return said


def _restore_recorded(run: Run, sw: Switch, seconds: float = 120.0) -> bool:
    """Wait until the store holds the restore of ``sw`` (its job records it as it starts).

    A probe sent while the restore is still on its way races it: a ``--restart`` of the old
    job then passes the lineage check (nothing recorded yet) and is stopped by the outputs'
    owner fence instead, once the restored job has claimed them (nothing is written), which
    fails the old job's attempt (FAILED). The probes are of an operator's next move, made
    once the restore is done."""

    def recorded(st: Any) -> bool:
        old = st.get_job(sw.old)
        return any(r.job_id == sw.new for r in st.restores_from_job(sw.old, old.uid))

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if run.read(recorded):
            return True
        time.sleep(0.5)
    return False


def _once(run: Run, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """``stoker`` once in the run's environment (and ``env``): exit code, what it printed."""
    try:
        done = subprocess.run(
            stoker_cmd(*args),
            env={**os.environ, **run.env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=str(REPO),
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT:g}s"
    return done.returncode, done.stdout + done.stderr


def _light(state: str) -> list[str]:
    return ["--quiet", "-D", f"stoker.state_dir={state}", "-D", "stoker.master=local[1]"]


def _recorded(run: Run, job: str) -> bool | None:
    """Whether the store holds a record of ``job`` (None: the store cannot be read now)."""
    from stoker.errors import JobNotFound

    def has(st: Any) -> bool:
        try:
            st.get_job(job)
        except JobNotFound:
            return False
        return True

    return run.read(has)


def _refused(run: Run, what: str, rc: int, text: str, words: str) -> bool:
    if rc == 2 and words in text:
        return True
    run.problems.append(f"{what} was not refused (rc {rc}, wanted 2 and {words!r}): {text[-600:]}")
    return False


def _restore_twice(run: Run, sw: Switch, n: int) -> str | None:
    from tests.chaos import operators

    job = f"{run.schedule.workload.job}-x{n}"
    what = f"a second restore of {sw.savepoint} into {job}"
    if isinstance(run.op, operators.Managed):
        rc, text = _submit(run, job, sw.savepoint)
        if rc is None:
            return None  # no manager answered: nothing was tried
        if rc != 422 or "was restored before into" not in text:
            run.problems.append(f"{what} was not refused with 422 (HTTP {rc}): {text[-600:]}")
            return f"{what}: HTTP {rc}, NOT refused"
    else:
        state = str(run.base / f"probe-{n}")
        args = ["run", str(run.app), "--job-id", job, "--from-savepoint", sw.savepoint]
        rc, text = _once(run, [*args, *_light(state)])
        if not _refused(run, what, rc, text, "was restored before into"):
            return f"{what}: rc {rc}, NOT refused"
    if _recorded(run, job):
        run.problems.append(f"{what} was refused but left a record of job {job!r}")
    return f"{what}: refused ({rc})"


def _submit(run: Run, job: str, savepoint: str) -> tuple[int | None, str]:
    body = {
        "job_id": job,
        "entrypoint": str(run.app),
        "from_savepoint": savepoint,
        "conf": {"stoker.master": "local[1]"},
    }
    for m in run.op.live():
        try:
            r = m.http.post("/v1/jobs", json=body)
        except Exception:
            continue
        if r.status_code < 500:
            return r.status_code, r.text
    return None, "no manager answered"


def _restart_restored(run: Run, sw: Switch) -> str | None:
    from tests.chaos import operators

    if not isinstance(run.op, operators.Local):
        return None  # under the managers the old job's driver refuses it (FAILED): not probed
    k = run.switches.index(sw) + 1
    state = run.base / ("state" if k == 1 else f"state-r{k - 1}")
    app = run.base / "app" / ("chaos_app.py" if k == 1 else f"chaos_app_r{k - 1}.py")
    what = f"job {sw.old} run again with --restart after its savepoint went to {sw.new}"
    args = ["run", str(app), "--restart", *_light(str(state))]
    if sw.old != run.schedule.workload.job:
        args += ["--job-id", sw.old]
    before = run.read(lambda st: str(st.get_job(sw.old).state))
    rc, text = _once(run, args)
    if not _refused(run, what, rc, text, "was restored into"):
        return f"{what}: rc {rc}, NOT refused"
    after = run.read(lambda st: str(st.get_job(sw.old).state))
    if before is not None and after is not None and after != before:
        run.problems.append(f"{what} was refused but the job went from {before} to {after}")
    return f"{what}: refused ({rc})"


def _fork_early(run: Run, sw: Switch, n: int) -> str | None:
    from tests.chaos import operators

    if not isinstance(run.op, operators.Local):
        return None  # the managers' drivers take the run's outputs from the managers' env
    if run.read(lambda st: str(st.get_job(sw.new).state)) not in LIVE:
        return None  # the restored job has ended: a fork may rightly go on
    job = f"{run.schedule.workload.job}-f{n}"
    what = f"a fork of {sw.savepoint} into {job} while {sw.new} runs"
    own = {"CHAOS_OUT": str(run.base / f"out-fork-{n}"), "CHAOS_PG_TABLE": f"fork{n}"}
    args = ["run", str(run.app), "--job-id", job, "--from-savepoint", sw.savepoint, "--fork"]
    rc, text = _once(run, [*args, *_light(str(run.base / f"probe-{n}"))], own)
    if rc == 0 and run.read(lambda st: str(st.get_job(sw.new).state)) not in LIVE:
        return f"{what}: ran, {sw.new} having ended meanwhile"
    if not _refused(run, what, rc, text, "waits for the job it was restored into"):
        return f"{what}: rc {rc}, NOT refused"
    if _recorded(run, job):
        run.problems.append(f"{what} was refused but left a record of job {job!r}")
    return f"{what}: refused ({rc})"
