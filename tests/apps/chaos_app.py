"""The chaos harness's workload (tests/chaos): real sources and sinks, chosen by environment.

CHAOS_JOB        job id
CHAOS_GEN        ids 0..CHAOS_GEN-1 from a bounded generator (0: none)
CHAOS_PER_EPOCH  the generator's rows per epoch
CHAOS_STATEFUL   "1": the generator yields every id twice (0..2N-1 taken mod N) and a
                 dropDuplicates keeps one: the state store must survive every fault
CHAOS_FILES_IN   an unbounded files source (JSON lines, column id) read beside the generator
CHAOS_OUT        the files sink's folder
CHAOS_PG_DSN     a PostgreSQL sink (table CHAOS_PG_TABLE) when set
CHAOS_TRIGGER    the trigger interval (default 200ms)

A restore from a savepoint (the harness's ``savepoint_restore``) runs a changed copy of this
file that tests/chaos/runner.py writes: its transform goes just before ``@p.on_control``.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources

N = int(os.environ.get("CHAOS_GEN", "0"))
STATEFUL = os.environ.get("CHAOS_STATEFUL") == "1"
p = Pipeline(os.environ["CHAOS_JOB"], config={"chaos": 0})


def _dedup(df):
    from pyspark.sql import functions as F

    return df.select((F.col("id") % N).alias("id")).dropDuplicates(["id"])


if N:
    gen = sources.generator(
        total=2 * N if STATEFUL else N,
        max_rows_per_epoch=int(os.environ.get("CHAOS_PER_EPOCH", "200")),
    )
    p.source(gen, map=_dedup if STATEFUL else None)
if os.environ.get("CHAOS_FILES_IN"):
    p.source(sources.files(os.environ["CHAOS_FILES_IN"], "json", "id long", max_file_age=None))
p.sink(sinks.files(os.environ["CHAOS_OUT"]))
if os.environ.get("CHAOS_PG_DSN"):
    p.sink(sinks.postgres(os.environ["CHAOS_PG_DSN"], table=os.environ["CHAOS_PG_TABLE"]))


@p.on_control("poke")
def _poke(event, ctx):
    """A custom control event: does nothing but be applied at an epoch boundary."""


if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("CHAOS_TRIGGER", "200ms"))
