"""Job manager failover and supervised recovery, on a throwaway PostgreSQL store.

1. Leader kill -9: two managers on one store, a job running under the leader. SIGKILL the
   leader; measure until the standby (a) reports itself leader, (b) has started the attempt of a
   job submitted right after the kill (it serves writes: submissions become running attempts).
   Count the restarts the failover caused to the running job (goal: 0, its driver pid unchanged).
2. Driver kill -9 under supervision: SIGKILL a driver's process group; measure until the first
   epoch committed by the attempt the manager started in its place. Baseline in the same run:
   the same app restarted by hand right after the kill (``stoker run`` in-process), which is
   what a user without a manager does.

    python benchmarks/failover.py [--runs 3] [--json out.json]
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import arg_parser, write_json
from _common import start_manager as _start

REPO = Path(__file__).resolve().parent.parent

APP = """
import os
import sys
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline(os.environ.get("BENCH_JOB", "bench"))
p.source(sources.generator(rows_per_second=400, max_rows_per_epoch=400))
p.sink(sinks.files(sys.argv[1] if len(sys.argv) > 1 else os.environ["BENCH_OUT"]))
if __name__ == "__main__":
    stoker.run(p, trigger="250ms")
"""


def start_manager(store: str, state: Path, allow: Path) -> tuple[subprocess.Popen[bytes], str]:
    return _start(store, state, allow, "--leader-ttl", "3", "--lease-ttl", "10")


def is_leader(url: str) -> bool:
    try:
        return bool(httpx.get(f"{url}/healthz", timeout=1).json()["leader"])
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def wait(cond, timeout: float, what: str, every: float = 0.02) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def job(url: str, jid: str) -> dict:
    return dict(httpx.get(f"{url}/v1/jobs/{jid}", timeout=5).json())


def committed_by(url: str, jid: str, attempt: int) -> bool:
    eps = httpx.get(f"{url}/v1/jobs/{jid}/epochs", params={"limit": 5}, timeout=5).json()
    return any(e["state"] == "COMMITTED" and e["decided_by"] == attempt for e in eps)


def submit(url: str, jid: str, app: Path, out: Path) -> None:
    conf = {"stoker.master": "local[1]"}
    resp = httpx.post(
        f"{url}/v1/jobs",
        json={
            "job_id": jid,
            "entrypoint": str(app),
            "conf": conf,
            "args": [str(out)],
            "restart_strategy": {"strategy": "fixed-delay", "attempts": 5, "delay": 0},
        },
        timeout=30,
    )
    assert resp.status_code in (200, 201), resp.text


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def leader_failover(pg_dsn: str, work: Path, app: Path, run: int) -> dict:
    a = start_manager(pg_dsn, work / f"m{run}a", app.parent)
    wait(lambda: is_leader(a[1]), 30, "first leader")
    b = start_manager(pg_dsn, work / f"m{run}b", app.parent)
    managers = [a, b]
    jid = f"fo{run}"
    submit(a[1], jid, app, work / f"out-{jid}")
    wait(lambda: committed_by(a[1], jid, 1), 240, "first epoch")
    pid_before = job(a[1], jid)["attempt"]["pid"]
    leader, standby = (a, b) if is_leader(a[1]) else (b, a)
    t0 = time.monotonic()
    kill_group(leader[0].pid)
    leader[0].wait()
    # A job submitted right after the kill, to the standby: when does its attempt start?
    probe = f"probe{run}"
    submit(standby[1], probe, app, work / f"out-{probe}")
    wait(lambda: is_leader(standby[1]), 30, "standby to lead")
    t_lead = time.monotonic() - t0
    wait(
        lambda: (
            (job(standby[1], probe).get("attempt") or {}).get("state") in ("STARTING", "RUNNING")
        ),
        30,
        "probe attempt",
    )
    t_write = time.monotonic() - t0
    # Keep the running job under watch a while: no restart, same driver, epochs go on.
    n0 = len([e for e in httpx.get(f"{standby[1]}/v1/jobs/{jid}/epochs").json()])
    time.sleep(5)
    after = job(standby[1], jid)
    n1 = len([e for e in httpx.get(f"{standby[1]}/v1/jobs/{jid}/epochs").json()])
    restarts = int(after["current_attempt"]) - 1
    for url in (standby[1],):
        for j in (jid, probe):
            httpx.post(f"{url}/v1/jobs/{j}/cancel", timeout=10)
    wait(lambda: job(standby[1], jid)["state"] in ("CANCELED", "FAILED", "FINISHED"), 120, "cancel")
    for p, _ in managers:
        kill_group(p.pid)
    return {
        "to_leader_s": t_lead,
        "to_serving_writes_s": t_write,
        "restarts": restarts,
        "driver_pid_unchanged": after["attempt"]["pid"] == pid_before,
        "epochs_kept_committing": n1 > n0,
    }


def supervised_driver_kill(pg_dsn: str, work: Path, app: Path, run: int) -> dict:
    m = start_manager(pg_dsn, work / f"k{run}", app.parent)
    wait(lambda: is_leader(m[1]), 30, "leader")
    jid = f"dk{run}"
    submit(m[1], jid, app, work / f"out-{jid}")
    wait(lambda: committed_by(m[1], jid, 1), 240, "first epoch")
    pid = job(m[1], jid)["attempt"]["pid"]
    t0 = time.monotonic()
    kill_group(pid)
    wait(lambda: committed_by(m[1], jid, 2), 240, "epoch of attempt 2", every=0.1)
    supervised = time.monotonic() - t0
    httpx.post(f"{m[1]}/v1/jobs/{jid}/cancel", timeout=10)
    wait(lambda: job(m[1], jid)["state"] in ("CANCELED", "FAILED", "FINISHED"), 120, "cancel")
    kill_group(m[0].pid)

    # Baseline: the same app restarted by hand right after a kill -9.
    state = work / f"manual{run}"
    env = {**os.environ, "BENCH_OUT": str(work / f"out-manual{run}"), "BENCH_JOB": f"man{run}"}
    argv = [
        sys.executable,
        "-m",
        "stoker.cli",
        "run",
        str(app),
        "-D",
        f"stoker.state_dir={state}",
        "-D",
        "stoker.master=local[1]",
        "--quiet",
    ]
    from stoker.store import open_store

    def committed(attempt: int) -> bool:
        if not (state / "store.db").exists():
            return False
        st = open_store(state / "store.db")
        try:
            return any(
                e.state == "COMMITTED" and e.decided_by == attempt
                for e in st.list_epochs(f"man{run}", limit=5)
            )  # type: ignore[arg-type]
        except Exception:
            return False
        finally:
            st.close()

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    first = launch()
    wait(lambda: committed(1), 240, "manual first epoch", every=0.1)
    t0 = time.monotonic()
    kill_group(first.pid)
    first.wait()
    second = launch()
    wait(lambda: committed(2), 240, "manual epoch of attempt 2", every=0.1)
    manual = time.monotonic() - t0
    kill_group(second.pid)
    second.wait()
    return {"supervised_s": supervised, "manual_restart_s": manual}


def main() -> None:
    ap = arg_parser(__doc__ or "")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from tests.pg import ThrowawayPostgres

    fo, dk = [], []
    with tempfile.TemporaryDirectory() as tmp, ThrowawayPostgres() as pg:
        work = Path(tmp)
        app = work / "apps" / "bench_app.py"
        app.parent.mkdir()
        app.write_text(APP)
        for run in range(args.runs):
            fo.append(leader_failover(pg.dsn, work, app, run))
            print("leader failover", run, fo[-1], flush=True)
            dk.append(supervised_driver_kill(pg.dsn, work, app, run))
            print("driver kill", run, dk[-1], flush=True)
    med = statistics.median
    print(
        "\nleader kill -9 -> standby leads:          median "
        f"{med(r['to_leader_s'] for r in fo):.2f} s"
        f"  (runs {[round(r['to_leader_s'], 2) for r in fo]})"
    )
    print(
        f"leader kill -9 -> standby starts attempts: median "
        f"{med(r['to_serving_writes_s'] for r in fo):.2f} s  (goal <= 5 s)"
    )
    print(
        f"job restarts caused by the failover:      {sum(r['restarts'] for r in fo)} "
        f"(driver pid unchanged in {sum(r['driver_pid_unchanged'] for r in fo)}/{len(fo)},"
        f" epochs kept committing in {sum(r['epochs_kept_committing'] for r in fo)}/{len(fo)})"
    )
    sup = med(r["supervised_s"] for r in dk)
    man = med(r["manual_restart_s"] for r in dk)
    print(
        f"driver kill -9 -> next committed epoch:  supervised median {sup:.1f} s, "
        f"restarted by hand median {man:.1f} s, ratio {sup / man:.2f}"
    )
    write_json(args.json, {"leader_failover": fo, "driver_kill": dk})


if __name__ == "__main__":
    main()
