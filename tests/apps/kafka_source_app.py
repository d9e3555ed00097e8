"""A test driver: a Kafka topic of JSON ids -> files sink, through sources.kafka.

Environment: KSRC_BOOTSTRAP, KSRC_TOPIC, KSRC_OUT (files sink folder) (required),
KSRC_PER_EPOCH (max_records_per_epoch, default 300), KSRC_JOB (job id, default "ksrc"),
KSRC_TRIGGER (default 100ms). Run it with
``stoker run tests/apps/kafka_source_app.py -D stoker.state_dir=...``.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline(os.environ.get("KSRC_JOB", "ksrc"))
p.source(
    sources.kafka(
        os.environ["KSRC_BOOTSTRAP"],
        topics=[os.environ["KSRC_TOPIC"]],
        max_records_per_epoch=int(os.environ.get("KSRC_PER_EPOCH", "300")),
    )
)
p.transform(lambda df: sources.decode_json(df, "id long", keep=("partition", "offset")))
p.sink(sinks.files(os.environ["KSRC_OUT"]))

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("KSRC_TRIGGER", "100ms"))
