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
Counts words in JSON lines files moved into a folder over a sliding window of configurable
duration. Each line carries its text and the timestamp that determines the windows into which
its words fall: {"value": "a line of words", "timestamp": "2026-12-02T10:00:03.5Z"}.

Usage: structured_network_wordcount_windowed.py <input dir> <output dir> <window duration>
  [<slide duration>]
<input dir> is the folder the files arrive in (moved in whole); <output dir> receives the
windowed counts.
<window duration> gives the size of window, specified as integer number of seconds
<slide duration> gives the amount of time successive windows are offset from one another,
given in the same units as above. <slide duration> should be less than or equal to
<window duration>. If the two are equal, successive windows have no overlap. If
<slide duration> is not provided, it defaults to <window duration>.

To run this on your local machine:
   `$ stoker run examples/spark_ports/structured_network_wordcount_windowed.py in out 10 5`
then move files into in/; out/current holds the counts (JSON lines).

One recommended <window duration>, <slide duration> pair is 10, 5

Ported to stoker from Apache Spark's
examples/src/main/python/sql/streaming/structured_network_wordcount_windowed.py (Apache
License 2.0, the header above). The query is Spark's, unchanged. What differs: the input is a
folder of JSON lines files with the columns the socket source's includeTimestamp gives (value,
timestamp) instead of a socket (sources.socket(host, port,
include_timestamp=True) would read it, with the time each line arrived: files give times a
test can count exactly), the output is
files instead of the console (each epoch's table written exactly once), and stoker.run
replaces start() and awaitTermination().
"""

import sys

from pyspark.sql.functions import explode, split, window

import stoker
from stoker import Pipeline, sinks, sources

if __name__ == "__main__":
    if len(sys.argv) != 5 and len(sys.argv) != 4:
        msg = (
            "Usage: structured_network_wordcount_windowed.py <input dir> <output dir> "
            "<window duration in seconds> [<slide duration in seconds>]"
        )
        print(msg, file=sys.stderr)
        sys.exit(-1)

    inputDir = sys.argv[1]
    outputDir = sys.argv[2]
    windowSize = int(sys.argv[3])
    slideSize = int(sys.argv[4]) if (len(sys.argv) == 5) else windowSize
    if slideSize > windowSize:
        print("<slide duration> must be less than or equal to <window duration>", file=sys.stderr)
    windowDuration = "{} seconds".format(windowSize)  # noqa: UP032 (Spark's line)
    slideDuration = "{} seconds".format(slideSize)  # noqa: UP032

    def windowedCounts(lines):
        # Split the lines into words, retaining timestamps
        # split() splits each line into an array, and explode() turns the array into multiple rows
        words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)

        # Group the data by window and word and compute the count of each group
        return (
            words.groupBy(window(words.timestamp, windowDuration, slideDuration), words.word)
            .count()
            .orderBy("window")
        )

    p = Pipeline("StructuredNetworkWordCountWindowed", output_mode="complete")
    # the lines with their timestamps, two files at most per epoch
    p.source(
        sources.files(
            inputDir, "json", schema="value string, timestamp timestamp", max_files_per_epoch=2
        )
    )
    p.stream(windowedCounts)
    p.sink(sinks.files(outputDir, format="json"))

    stoker.run(p)
