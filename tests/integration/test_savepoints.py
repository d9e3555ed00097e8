"""Savepoints (issue 9, item 3) on real Spark, real SQLite and real PostgreSQL.

Two Spark scenarios: stop-with-savepoint, then a new job (another id, changed code: an extra
output column) from it, exactly once across the switch on a files and a PostgreSQL sink; and a
savepoint that lets the job go on. The refusals (not a savepoint, another shape, the
savepoint's job still live, a job with a checkpoint) and the restore's fix-ups of the copied
state run without Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

import stoker
from stoker import InvalidInput, JobState, Pipeline, sinks, sources
from stoker.control import events
from stoker.errors import CheckpointBehind
from stoker.runtime import restore, restore_control, savepoint
from stoker.sinks._files_owner import read_claim
from stoker.sinks.base import SinkOwner
from stoker.store import Owner, Store, open_store
from stoker.types import (
    AttemptNo,
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    job_id,
)
from tests.support import (
    APPS,
    REPO,
    exactly_once,
    file_sink_ids,
    pg_ids,
    pg_prepared,
    stoker_cmd,
    wait_for,
)
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.runtime.context import EpochContext

TRIGGER = "200ms"


# One core: see the ``spark`` fixture (tests/conftest.py).
SPARK_MASTER = "local[1]"


# helpers ---------------------------------------------------------------------------------------


def _store(state: Path) -> Store:
    return open_store(state / "store.db")


def _wait(what: str, pred: Callable[[], bool], timeout: float = 240.0) -> None:
    wait_for(what, pred, timeout, every=0.1)


def _committed(state: Path, jid: str) -> list[int]:
    if not (state / "store.db").exists():
        return []
    st = _store(state)
    try:
        return sorted(
            e.epoch
            for e in st.list_epochs(job_id(jid), limit=1000)
            if e.state == EpochState.COMMITTED
        )
    except stoker.JobNotFound:
        return []
    finally:
        st.close()


def _send(state: Path, jid: str, body: dict[str, Any]) -> str:
    """A control event as the manager stores one: validated against the job's spec."""
    st = _store(state)
    try:
        job = st.get_job(job_id(jid))
        kind, norm = events.validate(body, job.spec)
        ev, _ = st.add_control(job_id(jid), kind, norm, sender="test")
        return ev.control_id
    finally:
        st.close()


def _event(state: Path, jid: str, control_id: str) -> Any:
    st = _store(state)
    try:
        return st.get_control(job_id(jid), control_id)
    finally:
        st.close()


def _with_version(df: DataFrame, ctx: EpochContext) -> DataFrame:
    """The upgraded code: an extra column, from the job's config."""
    from pyspark.sql import functions as F

    return df.withColumn("version", F.lit(str(ctx.config["label"])))


def _ids_pipeline(name: str, out: Path, dsn: str | None, upgraded: bool = False) -> Pipeline:
    p = Pipeline(name, config={"label": "declared"})
    p.source(sources.generator(total=3000, max_rows_per_epoch=300))
    if upgraded:
        p.transform(_with_version)
    p.sink(sinks.files(str(out)))
    if dsn is not None:
        p.sink(sinks.postgres(dsn, table="ids"))
    return p


def _epoch_dirs(out: Path) -> dict[int, dict[str, Any]]:
    return {
        int(d.name.split("=")[1]): json.loads((d / "_manifest.json").read_text())
        for d in out.glob("epoch=*")
    }


def _versions(out: Path, epoch: int) -> set[Any]:
    found: set[Any] = set()
    for f in (out / f"epoch={epoch}").glob("*.parquet"):
        table = pq.read_table(f)
        found |= (
            set(table.column("version").to_pylist()) if "version" in table.schema.names else {None}
        )
    return found


def _pg_versions(dsn: str) -> dict[int, Any]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT id, version FROM ids").fetchall())


# 1. stop with a savepoint, then an upgraded job from it -----------------------------------------


def test_stop_with_savepoint_then_upgraded_job_from_it_writes_every_id_once(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    a_state, b_state, out, sp = tmp_path / "a", tmp_path / "b", tmp_path / "out", tmp_path / "sp"

    a = BackgroundRun(
        pipeline=_ids_pipeline("ids-a", out, pg_dsn),
        job_id="ids-a",
        state_dir=a_state,
        trigger=TRIGGER,
        spark=spark,
    )
    _wait("two epochs of job a", lambda: len(_committed(a_state, "ids-a")) >= 2)
    # Control state that the new job must start with: a config override and a rate limit.
    _send(a_state, "ids-a", {"kind": "config", "set": {"label": "from-control"}})
    _send(a_state, "ids-a", {"kind": "rate_limit", "max_rows_per_epoch": 250})
    sp_id = _send(a_state, "ids-a", {"kind": "savepoint", "stop": True, "dir": str(sp)})
    ra = a.join()

    assert ra.state == JobState.FINISHED
    ev = _event(a_state, "ids-a", sp_id)
    assert ev.status == ControlStatus.COMMITTED
    cut = ra.last_epoch
    assert cut is not None and ev.result == {"path": str(sp), "epoch": cut, "stop": True}
    assert ev.applied_epoch == cut
    a_ids = file_sink_ids(out)
    n = sum(a_ids.values())
    assert 0 < n < 3000, "job a was to stop before its end"
    assert a_ids == Counter(range(n)) and pg_ids(pg_dsn, "ids") == Counter(range(n))
    manifest = json.loads((sp / savepoint.MANIFEST).read_text())
    assert (manifest["job_id"], manifest["epoch"], manifest["stop"]) == ("ids-a", cut, True)
    assert sorted(p.name for p in (sp / "checkpoint" / "commits").iterdir() if p.name.isdigit())[
        -1
    ] == str(cut)
    st = _store(a_state)
    try:
        a_uid = st.get_job(job_id("ids-a")).uid
    finally:
        st.close()

    # The upgrade: an extra column (the table gets it as a user's migration would).
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE ids ADD COLUMN version text")
    rb = stoker.run(
        _ids_pipeline("ids-b", out, pg_dsn, upgraded=True),
        job_id="ids-b",
        state_dir=b_state,
        trigger=TRIGGER,
        spark=spark,
        from_savepoint=sp,
    )

    assert (rb.state, rb.attempt) == (JobState.FINISHED, 1)
    exactly_once(file_sink_ids(out), 3000)
    exactly_once(pg_ids(pg_dsn, "ids"), 3000)
    assert pg_prepared(pg_dsn) == []
    # b went on from a's last epoch: its first is the next one, and nothing before it.
    b_epochs = _committed(b_state, "ids-b")
    assert b_epochs[0] == cut + 1 and b_epochs == list(range(cut + 1, b_epochs[-1] + 1))
    owners = {e: (m["job_id"], m["uid"]) for e, m in _epoch_dirs(out).items()}
    assert owners == {e: ("ids-a" if e <= cut else "ids-b", a_uid) for e in range(b_epochs[-1] + 1)}
    # b's rows (and only b's) have the new column, with the config override a had.
    for e in owners:
        assert _versions(out, e) == ({None} if e <= cut else {"from-control"}), e
    versions = _pg_versions(pg_dsn)
    assert {i for i, v in versions.items() if v is None} == set(range(n))
    assert {v for i, v in versions.items() if i >= n} == {"from-control"}
    # b took a's outputs over (same uid), and a's control state through events of its own.
    claim = read_claim(out)
    assert claim is not None and (claim.job_id, claim.uid) == ("ids-b", a_uid)
    st = _store(b_state)
    try:
        job = st.get_job(job_id("ids-b"))
        carried = [e for e in st.list_controls(job_id("ids-b")) if e.sender == "savepoint"]
        rows = [e.rows_in for e in st.list_epochs(job_id("ids-b"), limit=100)]
    finally:
        st.close()
    assert job.uid == a_uid
    assert job.spec["from_savepoint"] == {"path": str(sp), "job_id": "ids-a", "epoch": cut}
    assert sorted(str(e.kind) for e in carried) == ["config", "rate_limit"]
    assert {(e.status, e.applied_epoch) for e in carried} == {(ControlStatus.COMMITTED, cut + 1)}
    assert rows and max(r or 0 for r in rows) <= 250  # the carried rate limit held


# 2. a savepoint that lets the job go on ------------------------------------------------------


def test_savepoint_without_stop_keeps_the_job_running_and_is_complete(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, out = tmp_path / "c", tmp_path / "out"

    def pipeline(name: str) -> Pipeline:
        p = Pipeline(name)
        p.source(sources.generator(max_rows_per_epoch=100))  # endless
        return p.sink(sinks.files(str(out)))

    c = BackgroundRun(
        pipeline=pipeline("gen-c"), job_id="gen-c", state_dir=state, trigger=TRIGGER, spark=spark
    )
    _wait("two epochs", lambda: len(_committed(state, "gen-c")) >= 2)
    sp_id = _send(state, "gen-c", {"kind": "savepoint"})
    _wait(
        "the savepoint",
        lambda: (
            _event(state, "gen-c", sp_id).status
            in (ControlStatus.COMMITTED, ControlStatus.REJECTED)
        ),
    )
    ev = _event(state, "gen-c", sp_id)
    assert ev.status == ControlStatus.COMMITTED, ev.reason
    cut = ev.result["epoch"]
    folder = Path(ev.result["path"])
    assert folder.parent == state / "savepoints" and ev.result["stop"] is False
    # The job goes on in the same driver: epochs after the savepoint's commit.
    _wait("epochs after the savepoint", lambda: _committed(state, "gen-c")[-1] >= cut + 2)

    # While it runs, no other job may take its outputs over from its savepoint (both would
    # write them); the refusal names both ways out (issue 23 item 5).
    d_state = tmp_path / "d"
    with pytest.raises(InvalidInput) as bad:
        stoker.run(pipeline("gen-d"), job_id="gen-d", state_dir=d_state, from_savepoint=folder)
    assert bad.value.field == "from_savepoint"
    assert "'gen-c' is still RUNNING" in str(bad.value) and "stop it first" in str(bad.value)
    assert "give the new job outputs of its own" in str(bad.value)
    assert not d_state.exists()

    st = _store(state)
    try:
        st.request_cancel(job_id("gen-c"))
    finally:
        st.close()
    rc = c.join()
    assert (rc.state, rc.attempt) == (JobState.CANCELED, 1)

    # The folder is complete and cut at the savepoint's epoch.
    manifest = savepoint.read_manifest(folder)
    assert (manifest["job_id"], manifest["epoch"], manifest["stop"]) == ("gen-c", cut, False)
    assert manifest["control_id"] == sp_id and manifest["inputs"][0]["kind"] == "generator"
    cp = folder / "checkpoint"
    assert (cp / "metadata").is_file()
    offsets = sorted(int(p.name) for p in (cp / "offsets").iterdir() if p.name.isdigit())
    commits = sorted(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    assert offsets == commits and commits[-1] == cut

    # Issue 23 item 5, the refusal's second way out followed: a fork to an output of its own
    # needs nothing of the old job, even live (here its record waits to restart: not ended).
    st = _store(state)
    try:
        st.restart_job(job_id("gen-c"), st.get_job(job_id("gen-c")).spec)
        assert not st.get_job(job_id("gen-c")).state.terminal
    finally:
        st.close()
    out2 = tmp_path / "out2"
    first, last = (cut + 1) * 100, (cut + 1) * 100 + 250
    fork = Pipeline("gen-e").source(sources.generator(total=last, max_rows_per_epoch=100))
    fork.sink(sinks.files(str(out2)))
    forked = stoker.run(
        fork, job_id="gen-e", state_dir=tmp_path / "e", trigger=TRIGGER, spark=spark,
        from_savepoint=folder,
    )  # fmt: skip
    assert forked.state == JobState.FINISHED
    assert Counter(file_sink_ids(out2)) == Counter(range(first, last))  # each id once
    claim = read_claim(out)  # the old output is still the old job's
    assert claim is not None and claim.job_id == "gen-c"
    assert not list(folder.parent.glob(".*tmp*"))


# 3. refusals: nothing is written ------------------------------------------------------------------


def _fake_savepoint(
    folder: Path,
    *,
    job: str = "old",
    uid: str = "u1",
    sources_: list[str] | None = None,
    sink_names: list[tuple[str, str]] | None = None,
    store: str | None = None,
    epoch: int | None = 2,
    inputs: list[dict[str, Any]] | None = None,
) -> Path:
    (folder / "checkpoint").mkdir(parents=True)
    manifest = {
        "format": savepoint.FORMAT,
        "job_id": job,
        "uid": uid,
        "epoch": epoch,
        "control_version": 3,
        "config": {},
        "state": {},
        "pipeline": {"name": job, "sources": sources_ or []},
        "sinks": [{"name": n, "kind": k} for n, k in sink_names or []],
        "inputs": inputs or [],
        "store": store,
        "control_id": "c0ffee",
    }
    (folder / savepoint.MANIFEST).write_text(json.dumps(manifest))
    return folder


def _gen_pipeline(name: str, out: Path) -> Pipeline:
    p = Pipeline(name)
    p.source(sources.generator(total=10, max_rows_per_epoch=5))
    return p.sink(sinks.files(str(out)))


def _refused(p: Pipeline, state: Path, folder: Path, *, job: str = "new") -> str:
    with pytest.raises(InvalidInput) as bad:
        stoker.run(p, job_id=job, state_dir=state, from_savepoint=folder)
    assert bad.value.field == "from_savepoint"
    return str(bad.value)


def test_refusals_name_the_problem_and_write_nothing(tmp_path: Path) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    gen = "generator(total=10, max_rows_per_epoch=5)"
    files_src = "files('/in', format='json', unbounded)"
    sink = (f"files:{out}", "files")

    # Not a savepoint.
    (tmp_path / "empty").mkdir()
    msg = _refused(_gen_pipeline("new", out), state, tmp_path / "empty")
    assert "is not a savepoint (no _savepoint.json)" in msg
    # Another source. (Another sink set is a fork's right, issue 23 item 5: not refused.)
    sp = _fake_savepoint(
        tmp_path / "sp1", sources_=[files_src], sink_names=[sink, ("postgres:t", "postgres")]
    )
    msg = _refused(_gen_pipeline("new", out), state, sp)
    assert f"source 1 was {files_src}, now generator(total=10" in msg
    assert "postgres:t" not in msg
    sp = _fake_savepoint(tmp_path / "sp2", sources_=[gen, gen], sink_names=[])
    msg = _refused(_gen_pipeline("new", out), state, sp)
    assert "the savepoint has 2 source(s)" in msg and "is new" not in msg
    # The savepoint's job is live (its own store, as a local run has it).
    old = tmp_path / "old"
    old.mkdir()
    st = open_store(old / "store.db")
    try:
        st.create_job(JobId("old"), "old", {}, {}, uid="u1")
        st.set_job_state(JobId("old"), JobState.RUNNING)
    finally:
        st.close()
    sp = _fake_savepoint(
        tmp_path / "sp3", sources_=[gen], sink_names=[sink], store=f"sqlite:///{old}/store.db"
    )
    msg = _refused(_gen_pipeline("new", out), state, sp)
    assert "the savepoint's job 'old' is still RUNNING" in msg and "--stop" in msg
    # Suspended (a signal stopped its run): no driver takes a savepoint --stop; the advice is a
    # cancel, which works on it (issue 23 item 5: each refusal's advice works as written).
    st = open_store(old / "store.db")
    try:
        st.set_job_state(JobId("old"), JobState.SUSPENDED)
        msg = _refused(_gen_pipeline("new", out), state, sp)
        assert "is still SUSPENDED" in msg and "stoker cancel old: it is suspended" in msg
        st.request_cancel(JobId("old"))  # what `stoker cancel old` does
        assert st.get_job(JobId("old")).state == JobState.CANCELED
        msg = _refused(_gen_pipeline("new", out), state, sp)  # now: its resolution is owed
        assert "python -m stoker.runtime.cleanup --job old" in msg
    finally:
        st.close()
    # A job that has a checkpoint already.
    (tmp_path / "has" / "checkpoint").mkdir(parents=True)
    msg = _refused(_gen_pipeline("new", out), tmp_path / "has", tmp_path / "sp2")
    assert "has a checkpoint already" in msg
    assert sorted(p.name for p in (tmp_path / "has").iterdir()) == ["checkpoint"]
    # The output went on after the savepoint: its later epochs would be written again.
    (out / "epoch=3").mkdir(parents=True)
    sp = _fake_savepoint(tmp_path / "sp4", sources_=[gen], sink_names=[sink])
    msg = _refused(_gen_pipeline("new", out), state, sp)
    assert "holds epochs 3..3, after the savepoint's epoch 2" in msg

    # The command line: the same refusal, exit code 2 (bad input), before Spark starts.
    cli_state = tmp_path / "cli"
    proc = subprocess.run(
        stoker_cmd(
            "run",
            str(APPS / "ids_app.py"),
            "--job-id",
            "ids-new",
            "--from-savepoint",
            str(tmp_path / "sp1"),
            "-D",
            f"stoker.state_dir={cli_state}",
        ),
        env={**os.environ, "IDS_OUT": str(out), "IDS_TOTAL": "10", "IDS_PER_EPOCH": "5"},
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "from_savepoint: the pipeline does not fit the savepoint" in proc.stderr
    assert "source 1 was files(" in proc.stderr

    assert not state.exists() and not cli_state.exists()
    assert sorted(p.name for p in out.iterdir()) == ["epoch=3"]


def test_a_restored_job_that_lost_its_checkpoint_is_refused_as_a_lost_checkpoint(
    tmp_path: Path,
) -> None:
    """A job restored from a savepoint, which went on past it and lost its checkpoint since,
    started again with the same ``--from-savepoint``: the refusal names the lost checkpoint
    (the store's epochs, the missing folder, the ways out), not the output after the savepoint
    that the restore's checks would find next (the job's own output). Found by chaos seed 14:
    before, it was refused as a restore over output past the savepoint."""
    out, state = tmp_path / "out", tmp_path / "state"
    sink = (f"files:{out}", "files")
    sp = _fake_savepoint(
        tmp_path / "sp",
        sources_=["generator(total=10, max_rows_per_epoch=5)"],
        sink_names=[sink],
        epoch=2,
    )
    state.mkdir()
    st = open_store(state / "store.db")
    try:
        jid = JobId("new")
        st.create_job(jid, "new", {}, {}, uid="u1")  # a restored job keeps the savepoint's uid
        gone = Owner(host="host-a", pid=101, pid_started="boot-1")  # its driver, gone
        st.start_attempt(jid, gone, 0.1, expected_current=AttemptNo(0))
        for e in (3, 4, 5):
            st.pin_epoch(jid, Epoch(e), AttemptNo(1), ControlVersion(0))
            st.decide_epoch(jid, Epoch(e), AttemptNo(1), rows_in=1, final=False)
    finally:
        st.close()
    for e in (3, 4, 5):
        (out / f"epoch={e}").mkdir(parents=True)  # its own output after the savepoint
    before = sorted(p.name for p in state.iterdir())

    with pytest.raises(CheckpointBehind) as bad:
        stoker.run(_gen_pipeline("new", out), job_id="new", state_dir=state, from_savepoint=sp)
    msg = str(bad.value)
    assert "the store has epochs 3..5 of job 'new' (uid u1) decided" in msg, msg
    assert "would end at batch 2 once the savepoint's checkpoint is installed" in msg, msg
    assert "restore the savepoint under another job id" in msg, msg
    assert "after the savepoint" not in msg, msg
    assert sorted(p.name for p in state.iterdir()) == before  # nothing written
    assert sorted(p.name for p in out.iterdir()) == ["epoch=3", "epoch=4", "epoch=5"]


# 4. the restore's fix-ups of the copied state (no Spark) ------------------------------------------


def _offsets_file(path: Path, *lines: dict[str, Any]) -> None:
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    path.write_text("\n".join(["v1", json.dumps(meta), *(json.dumps(x) for x in lines)]))
    (path.parent / f".{path.name}.crc").write_bytes(b"crc")


def test_restore_copies_cuts_and_fixes_up_the_state_and_hands_outputs_over(
    tmp_path: Path,
) -> None:
    old_in, new_in, out = tmp_path / "in-old", tmp_path / "in-new", tmp_path / "out"
    new_in.mkdir()
    out.mkdir()
    (out / "_stoker_owner.json").write_text(
        json.dumps({"job_id": "old", "uid": "u1", "claimed_at": 1.0})
    )
    descr = f"files({str(old_in)!r}, format='json', unbounded)"
    sp = _fake_savepoint(
        tmp_path / "sp",
        sources_=[descr],
        sink_names=[(f"files:{out}", "files")],
        inputs=[{"sid": "s0", "kind": "files", "describe": descr, "folder": str(old_in)}],
        epoch=1,
    )
    sp_manifest = json.loads((sp / savepoint.MANIFEST).read_text())
    sp_manifest["state"] = {
        "overrides": {"label": "kept", "gone": 1},
        "rate_limit": {"max_files_per_epoch": 2, "rows_per_second": 5.0},
        "log_level": {"root": "WARN", "loggers": {"my.mod": "DEBUG"}},
        "trigger_s": 0.3,
        "paused": True,
    }
    (sp / savepoint.MANIFEST).write_text(json.dumps(sp_manifest))
    cp = sp / "checkpoint"
    (cp / "offsets").mkdir()
    (cp / "commits").mkdir()
    (cp / "metadata").write_text('{"id":"6d1f0f0e-0000-0000-0000-000000000000"}')
    (cp / ".metadata.crc").write_bytes(b"crc")
    for n in range(3):  # offsets 0..2: epoch 2 planned, never committed
        _offsets_file(
            cp / "offsets" / str(n), {"sid": "s0", "seq": n + 1, "finished": False, "cv": 7}
        )
    for n in range(2):
        (cp / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (cp / "state" / "0" / "0").mkdir(parents=True)
    (cp / "state" / "0" / "0" / "2.delta").write_bytes(b"state")
    (sp / "sources").mkdir()
    log = [
        {"seq": 0, "path": f"{old_in}/a.json", "size": 1, "mtime": 1},
        {"seq": 1, "path": f"{old_in}/b.json", "size": 1, "mtime": 2},
        {"seq": 2, "path": "/elsewhere/c.json", "size": 1, "mtime": 3},
    ]
    (sp / "sources" / "s0.files.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log))
    (sp / "sources" / "s0.files.jsonl.lock").write_text("")

    p = Pipeline("new", config={"label": "declared"})
    p.source(sources.files(str(new_in), format="json", schema="id long"))
    p.sink(sinks.files(str(out)))
    root = tmp_path / "state"
    plan = restore.check(sp, root, JobId("new"), p, root / "store.db", None)
    assert (plan.owner, plan.previous) == (
        SinkOwner(JobId("new"), "u1"),
        SinkOwner(JobId("old"), "u1"),
    )
    assert plan.owner_for(p.sinks[0]) == plan.previous and not root.exists()

    st = open_store(root / "store.db")
    try:
        done = restore.restore(sp, root, st, JobId("new"), p)
        assert done.copied and done.owner == SinkOwner(JobId("new"), "u1")
        got = root / "checkpoint"
        # Cut at the savepoint's epoch; the old job's control versions out of the offsets.
        assert sorted(x.name for x in (got / "offsets").iterdir()) == ["0", "1"]  # no .crc
        assert sorted(x.name for x in (got / "commits").iterdir()) == ["0", "1"]
        for n in range(2):
            lines = (got / "offsets" / str(n)).read_text().splitlines()
            assert json.loads(lines[2]) == {"sid": "s0", "seq": n + 1, "finished": False}
        meta = json.loads((got / "metadata").read_text())
        assert meta["id"] != "6d1f0f0e-0000-0000-0000-000000000000"
        assert not (got / ".metadata.crc").exists()
        assert (got / "state" / "0" / "0" / "2.delta").read_bytes() == b"state"
        # The file log now names the new folder (only entries that were under the old one).
        paths = [
            json.loads(x)["path"]
            for x in (root / "sources" / "s0.files.jsonl").read_text().splitlines()
        ]
        assert paths == [f"{new_in}/a.json", f"{new_in}/b.json", "/elsewhere/c.json"]
        assert not (root / "sources" / "s0.files.jsonl.lock").exists()
        claim = read_claim(out)
        assert claim is not None and (claim.job_id, claim.uid) == ("new", "u1")
        assert json.loads((root / restore.RESTORED).read_text())["path"] == str(sp)

        # Again (a rerun after a crash or stop): the job resumes, nothing is copied again.
        again = restore.restore(sp, root, st, JobId("new"), p)
        assert not again.copied and again.owner == done.owner

        # The control state comes as the new job's own events; what it no longer takes, not.
        st.create_job(JobId("new"), "new", p.spec(), {"label": "declared"}, uid="u1")
        st.set_job_state(JobId("new"), JobState.RUNNING)
        ids = restore_control.carry_control(st, JobId("new"), done, p)
        assert restore_control.carry_control(st, JobId("new"), done, p) == ids  # retry-safe
        sent = {e.control_id: e for e in st.list_controls(JobId("new"))}
        assert sorted(sent) == sorted(ids)
        assert {(str(e.kind), json.dumps(e.body, sort_keys=True)) for e in sent.values()} == {
            ("config", json.dumps({"set": {"label": "kept"}, "unset": []}, sort_keys=True)),
            ("rate_limit", json.dumps({"max_files_per_epoch": 2})),
            ("log_level", json.dumps({"level": "WARN"})),
            ("log_level", json.dumps({"level": "DEBUG", "logger": "my.mod"}, sort_keys=True)),
            ("trigger", json.dumps({"interval": 0.3, "seconds": 0.3}, sort_keys=True)),
        }
        assert all(
            e.sender == "savepoint" and e.status == ControlStatus.PENDING for e in sent.values()
        )
        snap = st.control_snapshot(JobId("new"))
        assert snap.config["label"] == "kept" and snap.trigger_s == 0.3 and not snap.paused
        assert ControlKind.SAVEPOINT not in {e.kind for e in sent.values()}
    finally:
        st.close()
