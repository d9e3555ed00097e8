#
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  See the NOTICE file distributed with
# this work for additional information regarding copyright ownership.
# The ASF licenses this file to You under the Apache License, Version 2.0
# (the "License"); you may not use this file except in compliance with
# the License.  You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#

r"""
Sessionizes the words of JSON lines files moved into a folder: each word is a session id,
each occurrence an event at its line's timestamp, and a session ends after 10 seconds
without an event. Lines as {"value": "a line of words", "timestamp": "2026-12-02T10:00:03Z"}.

Usage: structured_sessionization.py <input dir> <output dir>
<input dir> is the folder the files arrive in (moved in whole); <output dir> receives the
sessions.

To run this on your local machine:
   `$ stoker run examples/spark_ports/structured_sessionization.py in out`
then move files into in/; out/current holds every session so far (JSON lines).

Ported to stoker from Apache Spark's
examples/src/main/python/sql/streaming/structured_sessionization.py (Apache License 2.0, the
header above). The query is Spark's, unchanged. What differs: the input is a folder of JSON
lines files with the columns the socket source's includeTimestamp gives (value, timestamp)
instead of a socket (sources.socket(host, port,
include_timestamp=True) would read it, with the time each line arrived: files give times a
test can count exactly), the output is files
instead of the console (each epoch's table written exactly once), stoker.run replaces
start() and awaitTermination(), and the output mode is 'complete': Spark 4 refuses session
windows in 'update' mode, the example's ('append' would need a watermark).
"""

import sys

from pyspark.sql.functions import count, explode, session_window, split

import stoker
from stoker import Pipeline, sinks, sources

if __name__ == "__main__":
    if len(sys.argv) != 3:
        msg = "Usage: structured_sessionization.py <input dir> <output dir>"
        print(msg, file=sys.stderr)
        sys.exit(-1)

    inputDir = sys.argv[1]
    outputDir = sys.argv[2]

    def sessions(lines):
        # Split the lines into words, retaining timestamps
        # split() splits each line into an array, and explode() turns the array into multiple rows
        # treat words as sessionId of events
        events = lines.select(
            explode(split(lines.value, " ")).alias("sessionId"),
            lines.timestamp.alias("eventTime"),
        )

        # Group the data by window and word and compute the count of each group
        return (
            events.groupBy(
                session_window(events.eventTime, "10 seconds").alias("session"), events.sessionId
            )
            .agg(count("*").alias("numEvents"))
            .selectExpr(
                "sessionId",
                "CAST(session.start AS LONG)",
                "CAST(session.end AS LONG)",
                "CAST(session.end AS LONG) - CAST(session.start AS LONG) AS durationMs",
                "numEvents",
            )
        )

    p = Pipeline("StructuredSessionization", output_mode="complete")
    # the lines with their timestamps, two files at most per epoch
    p.source(
        sources.files(
            inputDir, "json", schema="value string, timestamp timestamp", max_files_per_epoch=2
        )
    )
    p.stream(sessions)
    p.sink(sinks.files(outputDir, format="json"))

    stoker.run(p)
