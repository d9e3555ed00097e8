"""An output folder belongs to one job: ``stoker.run`` on real Spark, real SQLite.

Before owner markers, the files sink took any ``epoch=N`` folder for its own: a second job (or
the same job id re-run from a fresh state folder) on the same path silently dropped its epochs.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import stoker
from stoker import JobState, Pipeline, SinkError, sinks, sources
from stoker.runtime.context import EpochContext
from stoker.sinks._files_owner import MARKER, read_claim
from stoker.store import open_store
from stoker.types import JobId
from tests.support import file_sink_ids

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TRIGGER = "100ms"


def _ids(jid: str, out: Path, total: int = 30) -> Pipeline:
    return (
        Pipeline(jid)
        .source(sources.generator(total=total, max_rows_per_epoch=10))
        .sink(sinks.files(str(out)))
    )


def _tree(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


def test_a_second_job_on_the_path_is_refused_at_validate_and_writes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    out, state_a, state_b = tmp_path / "out", tmp_path / "a", tmp_path / "b"
    first = stoker.run(_ids("job-a", out), state_dir=state_a, trigger=TRIGGER, spark=spark)
    assert first.state == JobState.FINISHED
    before = _tree(out)

    with pytest.raises(SinkError) as err:
        stoker.run(_ids("job-b", out), state_dir=state_b, trigger=TRIGGER, spark=spark)

    msg = str(err.value)
    assert "belongs to job 'job-a' (uid " in msg and "which claimed it at " in msg
    assert "choose another path, or delete the folder" in msg
    assert not state_b.exists()  # no state folder, so no store file either
    assert _tree(out) == before
    assert file_sink_ids(out) == Counter(range(30))
    # The owner itself runs again on its path (a restart of the ended job).
    again = stoker.run(
        _ids("job-a", out), state_dir=state_a, trigger=TRIGGER, spark=spark, restart=True
    )
    assert again.state == JobState.FINISHED
    assert file_sink_ids(out) == Counter(range(30))


def test_the_same_job_id_from_a_fresh_state_folder_is_refused_naming_the_old_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    stoker.run(_ids("orders", out), state_dir=tmp_path / "old", trigger=TRIGGER, spark=spark)
    st = open_store(tmp_path / "old" / "store.db")
    try:
        old_uid = st.get_job(JobId("orders")).uid
    finally:
        st.close()
    claim = read_claim(out)
    assert claim is not None and (claim.job_id, claim.uid) == ("orders", old_uid)

    with pytest.raises(SinkError) as err:
        stoker.run(_ids("orders", out), state_dir=tmp_path / "new", trigger=TRIGGER, spark=spark)

    msg = str(err.value)
    assert f"belongs to an earlier job of the same id: job 'orders' (uid {old_uid})" in msg
    assert "would number its epochs from 0 again" in msg
    assert not (tmp_path / "new").exists()
    assert file_sink_ids(out) == Counter(range(30))


def test_an_epoch_folder_of_another_job_found_at_commit_fails_the_job_loudly(
    spark: SparkSession, tmp_path: Path
) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    planted = out / "epoch=2"

    def plant(df: DataFrame, ctx: EpochContext) -> DataFrame:
        # After the job claimed the folder, another writer makes the folder of epoch 2.
        if ctx.epoch == 1 and not planted.exists():
            planted.mkdir()
            manifest = {"job_id": "intruder", "uid": "beef", "epoch": 2, "attempt": 7}
            (planted / "_manifest.json").write_text(json.dumps(manifest))
        return df

    p = _ids("victim", out).transform(plant)
    with pytest.raises(SinkError) as err:
        stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)

    msg = str(err.value)
    assert "epoch 2 of job 'victim' was decided for attempt 1, but " in msg
    assert "holds job 'intruder' (uid beef), attempt 7" in msg
    st = open_store(state / "store.db")
    try:
        assert st.get_job(JobId("victim")).state == JobState.FAILED
    finally:
        st.close()
    # Epochs 0 and 1 are the job's; epoch 2 is still staged (decided, not dropped), and the
    # intruder's folder is untouched.
    assert file_sink_ids(out) == Counter(range(20))
    assert json.loads((planted / "_manifest.json").read_text())["job_id"] == "intruder"
    staged = sorted(p.name for p in (out / "_staging").iterdir())
    assert len(staged) == 1 and staged[0].startswith("epoch=2.attempt=1.owner=")
    assert (out / MARKER).exists()
