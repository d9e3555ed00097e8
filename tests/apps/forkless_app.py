"""A test driver for tests/integration/test_hadoop_local.py: 300 generated ids, 30 per epoch,
through a stateful dropDuplicates (RocksDB state, written through Hadoop's local file system)
into a JSON files sink. Run it with ``stoker run tests/apps/forkless_app.py -D
stoker.state_dir=...``; FORKLESS_OUT is the sink's folder."""

import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("forkless")
p.source(
    sources.generator(total=300, max_rows_per_epoch=30),
    map=lambda df: df.dropDuplicates(["id"]),
)
p.sink(sinks.files(os.environ["FORKLESS_OUT"], format="json"))

if __name__ == "__main__":
    stoker.run(p, trigger="0s")
