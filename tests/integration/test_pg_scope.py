"""The PostgreSQL sink's parts are scoped by job, uid and resolved table, with real Spark.

Each test runs the ids app (files sink + PostgreSQL sink, optionally a second PostgreSQL sink
``postgres2``) as a real ``stoker run`` process:

- two jobs of one id from two state folders (each its own store, so its own uid) on one
  table: the second is refused before it runs, and the first's decided epoch survives it;
- two sinks on tables of one name in two schemas (through two search paths): each holds
  every id exactly once;
- two sinks on one table (written unqualified and schema-qualified): refused before Spark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from stoker.types import EpochState
from tests.integration.test_crash import (
    JOB,
    assert_finished_exactly_once,
    epochs,
    ids_env,
    opened,
    start_ids,
    tail,
    wait_exit,
)
from tests.support import exactly_once, pg_ids, pg_prepared, wait_group_gone

pytestmark = pytest.mark.timeout(1500)

TOTAL, PER_EPOCH = 5_000, 1_000


def run(state: Path, env: dict[str, str], log: Path) -> int:
    p = start_ids(state, env, log)
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    return rc


# The same job id from a second state folder is refused in every lane (test_files_ownership);
# this form, with PostgreSQL sinks and a resume after it, in the whole suite.
@pytest.mark.variant
def test_a_second_state_folder_of_the_job_id_is_refused_and_the_first_resumes_exactly(
    tmp_path: Path, pg_dsn: str
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    env = ids_env(out, pg_dsn, TOTAL, PER_EPOCH)
    log1, log2, log3 = (tmp_path / f"driver-{n}.log" for n in (1, 2, 3))
    # Run 1 dies right after deciding epoch 3: its parts are prepared, the epoch DECIDED.
    rc = run(state, {**env, "STOKER_FAULT": "after_decide:3"}, log1)
    assert rc == -9, f"expected the injected SIGKILL, got rc {rc}\n{tail(log1)}"
    decided = sorted(pg_prepared(pg_dsn))
    assert decided and all(g.startswith(f"stoker:{JOB}:3:1:") for g in decided), decided
    with opened(state) as st:
        uid = st.get_job(JOB).uid

    # The same job id from another state folder (its own store: another uid), with its own
    # files folder so that only the table is shared: refused before it runs, nothing touched.
    other = ids_env(tmp_path / "other-out", pg_dsn, TOTAL, PER_EPOCH)
    rc = run(tmp_path / "other-state", other, log2)
    text = log2.read_text(errors="replace")
    assert rc == 2, f"the second job should be refused, got rc {rc}\n{tail(log2)}"
    assert "postgres.table" in text and f"(uid {uid})" in text, tail(log2)
    assert sorted(pg_prepared(pg_dsn)) == decided
    assert epochs(state)[3].state == EpochState.DECIDED

    # Run 1 resumes: its recovery commits the decided epoch's parts, and the job finishes.
    rc = run(state, env, log3)
    assert rc == 0, f"the first job failed on resume, rc {rc}\n{tail(log3)}"
    assert_finished_exactly_once(state, out, pg_dsn, TOTAL, log3)


def _in_schema(dsn: str, schema: str) -> str:
    return make_conninfo(dsn, options=f"-c search_path={schema}")


def test_two_sinks_on_tables_of_one_name_in_two_schemas_are_each_exactly_once(
    tmp_path: Path, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA s1")
        conn.execute("CREATE SCHEMA s2")
    dsn1, dsn2 = _in_schema(pg_dsn, "s1"), _in_schema(pg_dsn, "s2")
    state, out, log = tmp_path / "state", tmp_path / "out", tmp_path / "driver.log"
    # Both sinks write "ids", which does not exist yet: each creates it in its own schema.
    env = {**ids_env(out, dsn1, TOTAL, PER_EPOCH), "IDS_PG2_DSN": dsn2, "IDS_PG2_TABLE": "ids"}

    rc = run(state, env, log)

    assert rc == 0, f"driver failed, rc {rc}\n{tail(log)}"
    assert_finished_exactly_once(state, out, dsn1, TOTAL, log)  # s1.ids
    exactly_once(pg_ids(dsn2, "ids"), TOTAL)  # s2.ids


def test_two_sinks_of_a_pipeline_on_one_table_are_refused_before_anything_runs(
    tmp_path: Path, pg_dsn: str
) -> None:
    state, out, log = tmp_path / "state", tmp_path / "out", tmp_path / "driver.log"
    env = {
        **ids_env(out, pg_dsn, TOTAL, PER_EPOCH),
        "IDS_PG2_DSN": pg_dsn,
        "IDS_PG2_TABLE": "public.ids",
    }

    rc = run(state, env, log)

    text = log.read_text(errors="replace")
    assert rc == 2, f"expected the pipeline refused, got rc {rc}\n{tail(log)}"
    assert "'postgres:ids'" in text and "'postgres2'" in text, tail(log)
    assert '"public"."ids"' in text, tail(log)
    assert pg_ids(pg_dsn, "ids") == Counter()
    assert pg_prepared(pg_dsn) == []
