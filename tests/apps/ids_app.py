"""A test driver: generated ids -> identity -> files sink (+ PostgreSQL sink when a DSN is set).

Environment: IDS_TOTAL (default 10000), IDS_PER_EPOCH (default 1000), IDS_OUT (files sink
folder, required), IDS_PG_DSN and IDS_PG_TABLE (optional PostgreSQL sink), IDS_PG2_DSN and
IDS_PG2_TABLE (an optional second one, named "postgres2"), IDS_JOB (job id, default "ids").
Run it with ``stoker run tests/apps/ids_app.py -D stoker.state_dir=...``.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources
from stoker.sinks import PostgresSink

p = Pipeline(os.environ.get("IDS_JOB", "ids"))
p.source(
    sources.generator(
        total=int(os.environ.get("IDS_TOTAL", "10000")),
        max_rows_per_epoch=int(os.environ.get("IDS_PER_EPOCH", "1000")),
    )
)
p.sink(sinks.files(os.environ["IDS_OUT"]))
if os.environ.get("IDS_PG_DSN"):
    p.sink(sinks.postgres(os.environ["IDS_PG_DSN"], table=os.environ.get("IDS_PG_TABLE", "ids")))
if os.environ.get("IDS_PG2_DSN"):
    p.sink(
        PostgresSink(
            os.environ["IDS_PG2_DSN"],
            table=os.environ.get("IDS_PG2_TABLE", "ids"),
            name="postgres2",
        )
    )

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("IDS_TRIGGER", "100ms"))
