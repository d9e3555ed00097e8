"""A test driver whose Python UDF raises in every task (tests/e2e/test_task_failure_output.py):
generated ids -> ``id // 0`` in a UDF -> a JSON files sink at UDF_FAILS_OUT."""

import os

from pyspark.sql import functions as F
from pyspark.sql import types as T

from stoker import Pipeline, sinks, sources


@F.udf(T.LongType())
def divide(x: int) -> int:
    return x // 0  # the user's line the error names


p = Pipeline("udf-fails")
p.source(
    sources.generator(total=100, max_rows_per_epoch=50),
    map=lambda df: df.withColumn("y", divide("id")),
)
p.sink(sinks.files(os.environ["UDF_FAILS_OUT"], format="json"))
