"""Zero-downtime upgrades (issue 24), for real: a ``stoker server``, a job on real Spark, and
new code given as another file.

- The new code warms beside the old, is swapped in at an epoch boundary, watched for three
  epochs and CONFIRMED: every id once in the files sink, the epochs after the swap written by
  the new code (its added column too), the old code's standby stopped after.
- New code that fails its first epochs is ROLLED_BACK to the old code (kept warm): every id
  once, the job RUNNING the old file again, the failure not counted.
- New code whose aggregation keys another type than the checkpoint's state is REFUSED before
  the swap, naming the difference; new code reading other sources is refused at once (422).
- The leading manager is SIGKILLed while an upgrade is under way: the next one carries it on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import JVM_OPTS, exactly_once, file_sink_ids, wait_for
from tests.support.manager import Manager, one_manager

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(1500)]

SPARK = 600.0  # cold Spark starts (and standbys warming beside them) on a loaded 2-core host

APP = """\
from pyspark.sql import functions as F
from stoker import Pipeline, sinks, sources

def transform(df, ctx):
{body}

pipeline = (
    Pipeline("up")
    .source(sources.generator(total=None, rows_per_second=50, max_rows_per_epoch=50, partitions=1))
    .transform(transform)
    .sink(sinks.files({out!r}))
)
"""

V1 = "    return df.withColumn('code', F.lit(1))"
V2 = "    return df.withColumn('code', F.lit(2)).withColumn('extra', F.lit('new'))"
BROKEN = """\
    if ctx.epoch >= 0:
        raise RuntimeError("the new code breaks on real rows")
    return df.withColumn('code', F.lit(2))"""

CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "200ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
}


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "upgrade") as m:
        yield m


def _app(tmp_path: Path, name: str, body: str, out: Path) -> Path:
    path = tmp_path / "apps" / f"{name}.py"
    path.write_text(APP.format(body=body, out=str(out)))
    return path


def _job(m: Manager, jid: str = "up") -> dict[str, Any]:
    r = m.http.get(f"/v1/jobs/{jid}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _committed(m: Manager, jid: str = "up", after: int = 0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        last = _job(m, jid).get("last_epoch") or {}
        return last if last.get("committed_at") and last["epoch"] > after else None

    return dict(wait_for(lambda: f"an epoch committed: {_job(m, jid)}", done, SPARK))


def _upgrade_ends(m: Manager, up: dict[str, Any], jid: str = "up") -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        r = m.http.get(f"/v1/jobs/{jid}/upgrades/{up['upgrade_id']}")
        assert r.status_code == 200, r.text
        rec = r.json()
        return rec if rec["state"] in ("CONFIRMED", "ROLLED_BACK", "REFUSED") else None

    return dict(
        wait_for(lambda: f"upgrade {up['upgrade_id']} to end\n{m.log_tail()}", ended, 2 * SPARK)
    )


def _cancel_and_count(m: Manager, out: Path, jid: str = "up") -> None:
    r = m.http.post(f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 202, r.text
    wait_for(
        lambda: f"the job to end: {_job(m, jid)}",
        lambda: _job(m, jid)["state"] == "CANCELED",
        SPARK,
    )
    ids = file_sink_ids(out)
    assert ids, "nothing was written"
    exactly_once(ids, max(ids) + 1)


def _codes(out: Path) -> dict[int, set[int]]:
    """Epoch -> the ``code`` values its rows carry."""
    import pyarrow.parquet as pq

    found: dict[int, set[int]] = {}
    for d in sorted(out.glob("epoch=*")):
        epoch = int(d.name.split("=", 1)[1])
        for f in d.glob("*.parquet"):
            found.setdefault(epoch, set()).update(
                pq.read_table(f, columns=["code"]).column("code").to_pylist()
            )
    return {e: c for e, c in found.items() if c}  # epochs with rows


def test_an_upgrade_swaps_at_an_epoch_boundary_and_is_confirmed_exactly_once(
    tmp_path: Path, manager: Manager
) -> None:
    m = manager
    out = tmp_path / "out"
    v1 = _app(tmp_path, "v1", V1, out)
    v2 = _app(tmp_path, "v2", V2, out)
    r = m.http.post("/v1/jobs", json={"entrypoint": str(v1), "conf": CONF})
    assert r.status_code == 201, r.text
    _committed(m)
    first = _job(m)["attempt"]

    # Its own file again is refused (a rollback runs it), as is an unknown field.
    r = m.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(v1)})
    assert r.status_code == 422 and r.json()["field"] == "entrypoint", r.text
    r = m.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(v2), "watch_epochs": 3})
    assert r.status_code == 202, r.text
    up = r.json()
    assert up["state"] == "PENDING" and up["to"]["entrypoint"] == str(v2)
    assert up["checks"]["sinks_kept"] and not up["checks"]["sinks_added"]
    # One live upgrade per job.
    again = m.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(v2)})
    assert again.status_code == 409, again.text
    # Shown while under way: the job's view and its page.
    assert (_job(m).get("upgrade") or {}).get("upgrade_id") == up["upgrade_id"]
    page = m.http.get("/ui/f/jobs/up/summary")
    assert page.status_code == 200 and 'id="job-upgrade"' in page.text, page.text[-2000:]

    done = _upgrade_ends(m, up)
    assert done["state"] == "CONFIRMED", done
    assert done["stop_attempt"] == first["attempt"]
    assert done["swap_attempt"] > first["attempt"]
    job = _job(m)
    assert job["state"] == "RUNNING"
    # The new code's attempt is the upgrade standby's process: no cold driver was started.
    attempts = m.http.get("/v1/jobs/up/attempts").json()
    swapped = next(a for a in attempts if a["attempt"] == done["swap_attempt"])
    assert swapped["state"] in ("RUNNING", "SUSPENDED", "FAILED", "CANCELED")
    assert all(a["attempt"] <= done["swap_attempt"] for a in attempts), attempts
    old = next(a for a in attempts if a["attempt"] == first["attempt"])
    assert old["state"] == "SUSPENDED", old  # stopped at an epoch boundary, not killed
    # The old code's standby (kept for a rollback) is stopped once confirmed: the job wants none.
    wait_for(lambda: f"no standby: {_job(m)}", lambda: not _job(m).get("standby"), 60)

    _cancel_and_count(m, out)
    codes = _codes(out)
    swap_epoch = min(e for e, c in codes.items() if 2 in c)
    assert all(c == {1} for e, c in codes.items() if e < swap_epoch), codes
    assert all(c == {2} for e, c in codes.items() if e >= swap_epoch), codes
    history = m.http.get("/v1/jobs/up/upgrades").json()
    assert [h["state"] for h in history] == ["CONFIRMED"]


def test_new_code_that_fails_its_first_epochs_is_rolled_back_exactly_once(
    tmp_path: Path, manager: Manager
) -> None:
    m = manager
    out = tmp_path / "out"
    v1 = _app(tmp_path, "v1", V1, out)
    bad = _app(tmp_path, "broken", BROKEN, out)
    r = m.http.post("/v1/jobs", json={"entrypoint": str(v1), "conf": CONF})
    assert r.status_code == 201, r.text
    _committed(m)
    r = m.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(bad)})
    assert r.status_code == 202, r.text
    done = _upgrade_ends(m, r.json())
    assert done["state"] == "ROLLED_BACK", done
    assert "breaks on real rows" in (done["detail"] or ""), done
    # The old code runs again, and commits.
    last = _committed(m)
    _committed(m, after=last["epoch"])
    job = _job(m)
    assert job["state"] == "RUNNING" and job["failures"] == 0, job
    assert job["attempt"]["attempt"] > done["swap_attempt"]
    _cancel_and_count(m, out)
    codes = _codes(out)
    assert all(c == {1} for c in codes.values()), codes  # the broken code committed nothing


STATEFUL = """\
from pyspark.sql import functions as F
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline("totals", output_mode="complete")
    .source(sources.generator(total=None, rows_per_second=50, max_rows_per_epoch=50, partitions=1))
    .stream(lambda df: df.groupBy({key}).agg(F.count("*").alias("n")))
    .sink(sinks.files({out!r}))
)
"""


def test_new_code_with_another_state_schema_or_other_sources_is_refused(
    tmp_path: Path, manager: Manager
) -> None:
    m = manager
    out = tmp_path / "out"
    v1 = tmp_path / "apps" / "totals.py"
    v1.write_text(STATEFUL.format(key="(F.col('id') % 3).alias('k')", out=str(out)))
    retyped = tmp_path / "apps" / "retyped.py"
    retyped.write_text(
        STATEFUL.format(key="(F.col('id') % 3).cast('string').alias('k')", out=str(out))
    )
    other = tmp_path / "apps" / "other.py"
    other.write_text(
        STATEFUL.format(key="(F.col('id') % 3).alias('k')", out=str(out)).replace(
            "generator(total=None", "generator(total=10_000_000"
        )
    )
    r = m.http.post("/v1/jobs", json={"entrypoint": str(v1), "conf": CONF, "job_id": "totals"})
    assert r.status_code == 201, r.text
    _committed(m, "totals")

    # Other sources: refused at once, nothing recorded.
    r = m.http.post("/v1/jobs/totals/upgrade", json={"entrypoint": str(other)})
    assert r.status_code == 422, r.text
    assert "other sources" in r.json()["error"], r.text
    assert m.http.get("/v1/jobs/totals/upgrades").json() == []

    # Another key type: the new code's standby finds it against the checkpoint; REFUSED.
    attempt = _job(m, "totals")["attempt"]["attempt"]
    r = m.http.post("/v1/jobs/totals/upgrade", json={"entrypoint": str(retyped)})
    assert r.status_code == 202, r.text
    done = _upgrade_ends(m, r.json(), "totals")
    assert done["state"] == "REFUSED", done
    assert "key is (string) in the new code, (long) in the checkpoint" in done["detail"], done
    job = _job(m, "totals")
    assert job["state"] == "RUNNING" and job["attempt"]["attempt"] == attempt, job
    assert done["stop_attempt"] is None  # the old code was never asked to stop


PG_APP = """\
from pyspark.sql import functions as F
from stoker import Pipeline, sinks, sources

def transform(df, ctx):
{body}

pipeline = (
    Pipeline("pgup")
    .source(sources.generator(total=None, rows_per_second=50, max_rows_per_epoch=50, partitions=1))
    .transform(transform)
    .sink(sinks.postgres({dsn!r}, "out", create_table=True))
)
"""


def test_a_postgres_sink_takes_the_columns_new_code_adds(
    tmp_path: Path, manager: Manager, pg_dsn: str
) -> None:
    import psycopg

    m = manager
    v1 = tmp_path / "apps" / "pg1.py"
    v1.write_text(PG_APP.format(body="    return df.select('id')", dsn=pg_dsn))
    v2 = tmp_path / "apps" / "pg2.py"
    v2.write_text(
        PG_APP.format(body="    return df.select('id', F.lit('v2').alias('note'))", dsn=pg_dsn)
    )
    r = m.http.post("/v1/jobs", json={"entrypoint": str(v1), "conf": CONF, "job_id": "pgup"})
    assert r.status_code == 201, r.text
    _committed(m, "pgup")
    r = m.http.post("/v1/jobs/pgup/upgrade", json={"entrypoint": str(v2), "watch_epochs": 2})
    assert r.status_code == 202, r.text
    done = _upgrade_ends(m, r.json(), "pgup")
    assert done["state"] == "CONFIRMED", done
    r = m.http.post("/v1/jobs/pgup/cancel")
    assert r.status_code == 202, r.text
    wait_for("the job to end", lambda: _job(m, "pgup")["state"] == "CANCELED", SPARK)
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT id, note FROM out").fetchall()
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) and set(ids) == set(range(max(ids) + 1))  # once each
    notes = {r[1] for r in rows}
    assert notes == {None, "v2"}  # the old rows NULL in the added column, the new ones set


def test_a_manager_failover_during_an_upgrade_leaves_it_to_the_next_leader(
    tmp_path: Path, pg_dsn: str
) -> None:
    """The leader is SIGKILLed while the new code warms (its standbys, the old driver and
    the upgrade live on in their own process groups and the store): the other manager takes
    the lease and carries the upgrade on: the swap, the watch, CONFIRMED, exactly once."""
    from stoker.store import open_store
    from stoker.types import StandbyRole
    from tests.support.manager import stop_all

    apps = tmp_path / "apps"
    apps.mkdir()
    out = tmp_path / "out"
    v1 = _app(tmp_path, "v1", V1, out)
    v2 = _app(tmp_path, "v2", V2, out)
    ms = [
        Manager(f"m{i}", pg_dsn, tmp_path / f"m{i}", [apps], tmp_path / f"m{i}.log")
        for i in range(2)
    ]
    view = open_store(pg_dsn)
    try:
        for x in ms:
            x.wait_up()
        lead = wait_for(
            "a leader", lambda: next((x for x in ms if (x.health() or {}).get("leader")), None), 60
        )
        other = next(x for x in ms if x is not lead)
        r = other.http.post("/v1/jobs", json={"entrypoint": str(v1), "conf": CONF})
        assert r.status_code == 201, r.text
        _committed(other)
        r = other.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(v2)})
        assert r.status_code == 202, r.text
        up = r.json()
        wait_for(
            "the new code's standby started",
            lambda: view.get_standby("up", StandbyRole.UPGRADE) is not None,  # type: ignore[arg-type]
            SPARK,
        )
        lead.kill()
        done = _upgrade_ends(other, up)
        assert done["state"] == "CONFIRMED", f"{done}\n{other.log_tail()}"
        assert (other.health() or {}).get("leader")
        _cancel_and_count(other, out)
        codes = _codes(out)
        assert {2} in codes.values() and {1} in codes.values(), codes
    finally:
        view.close()
        stop_all(ms)
