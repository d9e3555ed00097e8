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
Counts words in UTF8 encoded, '\n' delimited text files moved into a folder.
Usage: structured_network_wordcount.py <input dir> <output dir>
  <input dir> is the folder the text files arrive in (moved in whole; names starting with
  '.' or '_' are skipped until renamed); <output dir> receives the counts.

To run this on your local machine:
   `$ stoker run examples/spark_ports/structured_network_wordcount.py in out`
then move text files into in/; out/current holds the counts of every word so far (JSON
lines). Ctrl-C stops it; the same command again goes on from where it stopped.

Ported to stoker from Apache Spark's
examples/src/main/python/sql/streaming/structured_network_wordcount.py (Apache License 2.0,
the header above). The query is Spark's, unchanged. What differs: the input is a folder of
text files instead of a socket (sources.socket("localhost", 9999) reads Spark's socket
replayably, but lines a server sends while the driver is down are lost: a folder keeps them,
and the test of this port can count exactly after a kill -9), the output is files instead of
the console (each epoch's table written exactly once), and stoker.run replaces start() and
awaitTermination(); the checkpoint is the job's state folder
(./.stoker/StructuredNetworkWordCount), no directory to pass.
"""

import sys

from pyspark.sql.functions import explode, split

import stoker
from stoker import Pipeline, sinks, sources

if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("Usage: structured_network_wordcount.py <input dir> <output dir>", file=sys.stderr)
        sys.exit(-1)

    inputDir = sys.argv[1]
    outputDir = sys.argv[2]

    def wordCounts(lines):
        # input words
        words = lines.select(explode(split(lines.value, " ")).alias("word"))

        # the count for each distinct word
        return words.groupBy("word").count()

    p = Pipeline("StructuredNetworkWordCount", output_mode="complete")
    # input lines (may be multiple words on each line); two files at most per epoch, as a
    # socket gives an epoch what arrived since the last
    p.source(sources.files(inputDir, "text", max_files_per_epoch=2))
    p.stream(wordCounts)
    p.sink(sinks.files(outputDir, format="json"))

    stoker.run(p)
