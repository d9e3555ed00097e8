"""Zero-downtime upgrades (issue 24, "Measured"): the pause an upgrade to new code costs, the
old code's last committed epoch -> the new code's first committed epoch, against a
stop-with-savepoint and a new driver from the savepoint with the new code, in the same run;
and the pause of a rollback (new code that fails its first epoch, the old code back).

Everything is real: a ``stoker server`` (SQLite store) this script starts in a temporary
folder, the drivers and standbys it starts. Two jobs run side by side, each ``generator ->
files sink`` (parquet; endless, 50 ids a second, at most 50 an epoch, one partition),
``local[1]``, trigger 200 ms; each version of the code adds a column ``code`` (1, 2, ...):

* ``up``: upgraded with ``POST /v1/jobs/up/upgrade`` to the next version (watch 3 epochs),
  ``--rounds`` times (default 5); then once to code that raises in its epochs (rolled back);
* ``sp``: the same versions by hand, the way there was: ``POST /v1/jobs/{id}/savepoints``
  ``{"stop": true}``, then a new job ``sp-<k>`` submitted ``from_savepoint`` with the next
  version (its checkpoint, source log and outputs taken over).

Rounds alternate up / sp. Each pause is read from the store's commit times: the last epoch
committed by the old code (attempt or job) to the first committed by the new. An upgrade's
pause is split into: the stop asked (after the last commit), the old attempt ended, the new
attempt handed over, the first commit. At the end both jobs are canceled and each files sink
must hold every id the store says was read, once.

Run: ``python benchmarks/upgrade_swap.py [--rounds 5] [--json out.json]``. ``BENCH_KEEP=1``
keeps the work folder.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from standby_takeover import Loads, note, stop_bench

SPARK = 600.0
APP = """\
from pyspark.sql import functions as F
from stoker import Pipeline, sinks, sources

def transform(df, ctx):
{body}

pipeline = (
    Pipeline("bench")
    .source(sources.generator(total=None, rows_per_second=50, max_rows_per_epoch=50, partitions=1))
    .transform(transform)
    .sink(sinks.files({out!r}))
)
"""
CONF = {"stoker.master": "local[1]", "stoker.trigger": "200ms"}
RESTARTS = {"strategy": "fixed-delay", "attempts": 100, "delay": 1}
BROKEN = """\
    if ctx.epoch >= 0:
        raise RuntimeError("version {v} breaks on real rows")
    return df.withColumn('code', F.lit({v}))"""


class Bench:
    def __init__(self, root: Path) -> None:
        import httpx

        from stoker.store import open_store

        self.root = root
        (root / "apps").mkdir(parents=True)
        self.proc, self.url = C.start_manager(
            f"sqlite:///{root / 'store.db'}", root / "state", root / "apps", log=root / "server.log"
        )
        self.http = httpx.Client(base_url=self.url, timeout=120.0)
        self.store = open_store(str(root / "store.db"))
        self.outs: dict[str, Path] = {}

    def app(self, name: str, version: int, out: Path, broken: bool = False) -> Path:
        path = self.root / "apps" / f"{name}-v{version}.py"
        body = (
            BROKEN.format(v=version)
            if broken
            else f"    return df.withColumn('code', F.lit({version}))"
        )
        path.write_text(APP.format(body=body, out=str(out)))
        return path

    def submit(self, jid: str, app: Path, savepoint: str | None = None) -> None:
        body: dict[str, Any] = {
            "job_id": jid,
            "entrypoint": str(app),
            "conf": CONF,
            "restart_strategy": RESTARTS,
        }
        if savepoint:
            body["from_savepoint"] = savepoint
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text

    def job(self, jid: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{jid}").json())

    def settled(self, jid: str) -> dict[str, Any] | None:
        """The job once its current attempt has committed three epochs."""
        j = self.job(jid)
        att = j.get("attempt") or {}
        if att.get("state") != "RUNNING":
            return None
        mine = [
            e
            for e in self.store.list_epochs(jid, limit=5)
            if e.decided_by == att.get("attempt") and e.committed_at
        ]
        return j if len(mine) >= 3 else None

    def last_commit(self, jid: str, by: int | None = None) -> Any:
        for e in self.store.list_epochs(jid, limit=200):
            if e.committed_at and (by is None or e.decided_by == by):
                return e
        return None

    def first_commit(self, jid: str, since: int) -> Any:
        done = [
            e
            for e in self.store.list_epochs(jid, limit=200)
            if e.committed_at and (e.decided_by or 0) >= since
        ]
        return min(done, key=lambda e: e.epoch) if done else None

    def upgrade(self, version: int, broken: bool = False) -> dict[str, float]:
        C.wait_until("up settled", lambda: self.settled("up"), SPARK)
        app = self.app("up", version, self.outs["up"], broken)
        r = self.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(app), "watch_epochs": 3})
        assert r.status_code == 202, r.text
        uid = r.json()["upgrade_id"]

        def ended() -> Any:
            up = self.store.get_upgrade(uid)
            return up if up is not None and not up.state.live else None

        up = C.wait_until(f"upgrade {uid} ended", ended, 2 * SPARK, every=0.1)
        want = "ROLLED_BACK" if broken else "CONFIRMED"
        assert str(up.state) == want, (up.state, up.detail)
        assert up.stop_attempt is not None and up.swap_attempt is not None
        old = self.last_commit("up", by=up.stop_attempt)
        old_att = self.store.get_attempt("up", up.stop_attempt)
        new_att = self.store.get_attempt("up", up.swap_attempt)
        if broken:
            # The old code again: the first commit by an attempt after the failed one.
            first = C.wait_until(
                "a commit after the rollback",
                lambda: self.first_commit("up", up.swap_attempt + 1),
                SPARK,
                every=0.05,
            )
            failed = self.store.get_attempt("up", up.swap_attempt)
            return {
                "pause": first.committed_at - old.committed_at,
                "failed_to_commit": first.committed_at - (failed.ended_at or first.committed_at),
            }
        first = self.first_commit("up", up.swap_attempt)
        return {
            "pause": first.committed_at - old.committed_at,
            "stop_asked": (up.stop_at or 0) - old.committed_at,
            "old_ended": (old_att.ended_at or 0) - old.committed_at,
            "handed": new_att.started_at - old.committed_at,
            "interval": self.interval("up", up.stop_attempt),
        }

    def interval(self, jid: str, by: int) -> float:
        """The median time between two commits of the old code before the swap."""
        times = sorted(
            e.committed_at
            for e in self.store.list_epochs(jid, limit=40)
            if e.decided_by == by and e.committed_at
        )
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return C.median(gaps) if gaps else 0.0

    def savepoint_switch(self, old: str, new: str, version: int) -> dict[str, float]:
        C.wait_until(f"{old} settled", lambda: self.settled(old), SPARK)
        folder = self.root / "apps" / "savepoints" / new  # under the allowed folder
        r = self.http.post(f"/v1/jobs/{old}/savepoints", json={"stop": True, "dir": str(folder)})
        assert r.status_code in (200, 201, 202), r.text
        C.wait_until(f"{old} stopped", lambda: self.job(old)["state"] == "FINISHED", SPARK)
        cid = r.json()["control_id"]
        ev = self.store.get_control(old, cid)
        path = str((ev.result or {}).get("path") or folder)
        app = self.app("sp", version, self.outs["sp"])
        last = self.last_commit(old)
        t_submit = time.time()
        self.submit(new, app, savepoint=path)
        first = C.wait_until(
            f"{new}'s first commit", lambda: self.first_commit(new, 1), SPARK, every=0.05
        )
        return {
            "pause": first.committed_at - last.committed_at,
            "submitted": t_submit - last.committed_at,
        }

    def finish(self, jids: list[str]) -> dict[str, Any]:
        from tests.support.sinks import file_sink_ids

        live = [j for j in jids if self.job(j)["state"] not in ("FINISHED", "CANCELED")]
        for j in live:
            self.http.post(f"/v1/jobs/{j}/cancel")
        for j in live:
            C.wait_until(f"{j} canceled", lambda j=j: self.job(j)["state"] == "CANCELED", SPARK)
        out: dict[str, Any] = {}
        for name, chain in (("up", ["up"]), ("sp", [j for j in jids if j.startswith("sp")])):
            rows = 0
            for j in chain:
                rows = max(
                    rows, sum(e.rows_in or 0 for e in self.store.list_epochs(j, limit=1_000_000))
                )
            ids = file_sink_ids(self.outs[name])
            out[name] = {
                "ids": len(ids),
                "twice": sum(1 for v in ids.values() if v > 1),
                "missing": len(set(range(max(ids) + 1)) - set(ids)) if ids else 0,
            }
        return out

    def close(self) -> None:
        self.store.close()
        stop_bench(self.root, self.proc.pid)


def main() -> None:
    p = C.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    info = C.machine()
    C.print_machine(info)
    root = Path(tempfile.mkdtemp(prefix="stoker-upgrade-bench-"))
    loads = Loads()
    bench = Bench(root)
    ups: list[dict[str, float]] = []
    sps: list[dict[str, float]] = []
    backs: list[dict[str, float]] = []
    jids = ["up", "sp"]
    try:
        for name in ("up", "sp"):
            bench.outs[name] = bench.root / "out" / name
            bench.submit(name, bench.app(name, 1, bench.outs[name]))
        sp_job = "sp"
        for k in range(a.rounds):
            version = k + 2
            order = ("up", "sp") if k % 2 == 0 else ("sp", "up")
            for which in order:
                if which == "up":
                    r = bench.upgrade(version)
                    ups.append(r)
                    note(
                        f"upgrade to v{version}: pause {r['pause']:.2f} s (stop asked "
                        f"{r['stop_asked']:.2f}, old ended {r['old_ended']:.2f}, handed "
                        f"{r['handed']:.2f}; epochs every {r['interval']:.2f} s)"
                    )
                else:
                    new = f"sp-{version}"
                    r = bench.savepoint_switch(sp_job, new, version)
                    sp_job = new
                    jids.append(new)
                    sps.append(r)
                    note(f"savepoint + new driver v{version}: pause {r['pause']:.2f} s")
        for k in range(2):
            r = bench.upgrade(100 + k, broken=True)
            backs.append(r)
            note(
                f"rollback {k + 1}: pause {r['pause']:.2f} s (failure -> old code's commit "
                f"{r['failed_to_commit']:.2f} s)"
            )
        ends = bench.finish(jids)
        note(f"ends: {ends}")
    finally:
        bench.close()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    up_p = [r["pause"] for r in ups]
    sp_p = [r["pause"] for r in sps]
    back_p = [r["pause"] for r in backs]
    interval = C.median([r["interval"] for r in ups])
    rows = [
        ["upgrade (warm new code)", f"{C.median(up_p):.2f} ({C.spread(up_p, 2)})", "1.0x"],
        [
            "stop-with-savepoint + new driver",
            f"{C.median(sp_p):.2f} ({C.spread(sp_p, 2)})",
            f"{C.median(sp_p) / C.median(up_p):.1f}x",
        ],
        ["rollback (new code fails)", f"{C.median(back_p):.2f} ({C.spread(back_p, 2)})", "-"],
    ]
    print()
    print(C.table(["pause: old code's last commit -> new code's first (s)", "median", "/up"], rows))
    for step in ("stop_asked", "old_ended", "handed"):
        v = [r[step] for r in ups]
        print(f"  upgrade, {step} after the last old commit: {C.median(v):.2f} s")
    print(f"epochs every {interval:.2f} s (median, old code); goal: pause <= 1 epoch + 1 s")
    print(f"exactly once: {ends}")
    print(f"load average during the run: {loads.range()} (2 cpus)")
    C.write_json(
        a.json,
        {"machine": info, "upgrades": ups, "savepoints": sps, "rollbacks": backs, "ends": ends,
         "load": loads.samples},
    )  # fmt: skip
    sys.exit(0 if all(v["twice"] == 0 and v["missing"] == 0 for v in ends.values()) else 1)


if __name__ == "__main__":
    main()
