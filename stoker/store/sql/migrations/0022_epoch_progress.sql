-- kind: expand
-- What Spark's StreamingQueryProgress says of an epoch (issue 41 item 8), as a small JSON
-- object the driver writes with the epoch's other metrics: the input and processing rates,
-- Spark's durations by phase, each source's rows and each stateful operator's state (rows,
-- memory, size, times). The job manager's dashboard and /metrics read it; nothing else does.
-- NULL where unknown (epochs made before, replays, a progress Spark did not post).
ALTER TABLE epochs ADD COLUMN progress TEXT;
