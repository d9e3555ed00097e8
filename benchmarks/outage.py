"""An outage of what every job shares: the PostgreSQL server of the store and of every job's sink
down for minutes under several jobs of one job manager (issue 39 item 6).

Real processes: a throwaway PostgreSQL server holding both the job manager's store and the
jobs' sink tables; a ``stoker server`` on that store; ``--jobs`` jobs (a generator at 10 rows a
second into a table of their own, the default restart strategy) on local Spark. Once every job
has committed, the server is crashed (``pg_ctl stop -m immediate``) for ``--down`` seconds and
started again on its port with its data. Measured from its return: how long until each job is
RUNNING again with an epoch committed by an attempt started after the return (goal: all within
2 minutes), how the restarts spread (their start times after the return), and, after the jobs
are canceled, every id in every table once (no gap below the highest id, no id twice).

Run: ``python benchmarks/outage.py [--jobs 8] [--down 600]``. Not a test: a 10-minute outage is
longer than the suite's budget; tests/e2e/test_restart_through_outage.py is the test of the
default strategy through an outage of the sink's server alone.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from _common import REPO, arg_parser, machine, print_machine, write_json

from tests.chaos.nemesis import BouncingPostgres
from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager

APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline({job!r})
p.source(sources.generator(total=None, rows_per_second=10, max_rows_per_epoch=20, partitions=1))
p.sink(sinks.postgres({dsn!r}, table={table!r}))
"""
SPARK = 900.0  # every job's first epoch, on a loaded 2-core host


def _get(m: Manager, path: str) -> Any:
    r = m.http.get(path)
    r.raise_for_status()
    return r.json()


def _running_again_since(m: Manager, job: str, since: float) -> bool:
    """RUNNING, and an epoch committed by an attempt started at or after ``since``."""
    try:
        if _get(m, f"/v1/jobs/{job}")["state"] != "RUNNING":
            return False
        attempts = {a["attempt"]: a for a in _get(m, f"/v1/jobs/{job}/attempts")}
        epochs = _get(m, f"/v1/jobs/{job}/epochs")
    except Exception:
        return False
    return any(
        e["state"] == "COMMITTED"
        and (a := attempts.get(e["decided_by"])) is not None
        and (a.get("started_at") or 0) >= since
        for e in epochs
    )


def _ids(dsn: str, table: str) -> tuple[int, int, int]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*), count(DISTINCT id), max(id) FROM {table}").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2] if row[2] is not None else -1)


def main() -> None:
    p = arg_parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--down", type=float, default=600.0, help="seconds the server stays down")
    p.add_argument(
        "--max-starting", type=int, default=4, help="the manager's --max-starting (its default 4)"
    )
    ns = p.parse_args()
    info = machine()
    print_machine(info)
    pg = BouncingPostgres()
    pg.start()
    store_dsn = pg.create_database("stoker_store")
    sink_dsn = pg.create_database("stoker_sink")
    result: dict[str, Any] = {
        "machine": info,
        "jobs": ns.jobs,
        "down_s": ns.down,
        "max_starting": ns.max_starting,
    }
    with TemporaryDirectory(prefix="stoker-outage-") as tmp:
        root = Path(tmp)
        (root / "apps").mkdir()
        m = Manager(
            "outage",
            store_dsn,
            root / "state",
            [root / "apps"],
            root / "server.log",
            lease_ttl=10.0,
            leader_ttl=5.0,
            extra_args=["--max-starting", str(ns.max_starting)],
            cwd=REPO,
        )
        try:
            m.wait_up(timeout=120)
            names = [f"shared{i}" for i in range(ns.jobs)]
            for name in names:
                app = root / "apps" / f"{name}.py"
                app.write_text(APP.format(job=name, dsn=sink_dsn, table=f"ids_{name}"))
                conf = {
                    "stoker.master": "local[1]",
                    "stoker.trigger": "1s",
                    "spark.driver.extraJavaOptions": JVM_OPTS,
                }
                r = m.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf})
                assert r.status_code == 201, r.text
            t0 = time.time()
            for name in names:
                wait_for(
                    f"{name}'s first epoch",
                    lambda name=name: _running_again_since(m, name, 0.0),
                    SPARK,
                    every=1.0,
                )
            print(f"{ns.jobs} jobs committing after {time.time() - t0:.0f} s; server down now")
            down_at = time.time()
            pg.crash()
            time.sleep(ns.down)  # the outage itself: nothing to wait for
            pg.come_back()
            back = time.time()
            print(f"server back after {back - down_at:.0f} s")
            again: dict[str, float] = {}
            deadline = back + SPARK
            while len(again) < len(names) and time.time() < deadline:
                for name in names:
                    if name not in again and _running_again_since(m, name, back):
                        again[name] = time.time() - back
                time.sleep(1.0)
            starts = sorted(
                a["started_at"] - back
                for name in names
                for a in _get(m, f"/v1/jobs/{name}/attempts")
                if (a.get("started_at") or 0) >= back
            )
            failed = {name: _get(m, f"/v1/jobs/{name}")["state"] for name in names}
            for name in names:
                m.http.post(f"/v1/jobs/{name}/cancel")
            for name in names:
                wait_for(
                    f"{name} canceled",
                    lambda name=name: _get(m, f"/v1/jobs/{name}")["state"] == "CANCELED",
                    300,
                    every=1.0,
                )
            counts = {name: _ids(sink_dsn, f"ids_{name}") for name in names}
        finally:
            m.stop()
            pg.stop()
    once = all(rows == distinct == top + 1 for rows, distinct, top in counts.values())
    result.update(
        running_again_s=again,
        all_back=len(again) == len(names),
        back_p50_s=statistics.median(again.values()) if again else None,
        back_max_s=max(again.values()) if again else None,
        attempt_starts_after_return_s=starts,
        states_before_cancel=failed,
        ids=counts,
        every_id_once=once,
    )
    print(f"running again (s after the return): {sorted(again.values())}")
    print(f"attempt starts after the return (s): {[round(s, 1) for s in starts]}")
    print(f"rows, distinct ids, max id per table: {counts}; every id once: {once}")
    write_json(ns.json, result)


if __name__ == "__main__":
    main()
