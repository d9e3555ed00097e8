"""A test driver: generated ids -> a running count per ``id % 10`` (a source map that
aggregates) -> a PostgreSQL table, in the output mode COUNTS_MODE (``update``: upserted on
``k``; ``complete``: replaced).

Environment: COUNTS_PG_DSN (required), COUNTS_TOTAL (default 1000), COUNTS_PER_EPOCH (default
100), COUNTS_MODE (default update). Run it with ``stoker run tests/apps/counts_app.py -D
stoker.state_dir=...``.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources

mode = os.environ.get("COUNTS_MODE", "update")
p = Pipeline("counts", output_mode=mode)
p.source(
    sources.generator(
        total=int(os.environ.get("COUNTS_TOTAL", "1000")),
        max_rows_per_epoch=int(os.environ.get("COUNTS_PER_EPOCH", "100")),
    ),
    map=lambda df: df.groupBy((df.id % 10).alias("k")).count(),
)
p.sink(sinks.postgres(os.environ["COUNTS_PG_DSN"], "counts", key=["k"]))

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("COUNTS_TRIGGER", "100ms"))
