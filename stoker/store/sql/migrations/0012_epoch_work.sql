-- The part of an epoch spent on its rows (issue 21 item 7): the driver times its sinks' Spark
-- writes (the transform runs inside them), so the scaler can tell that work, which more
-- executors share, from the epoch's fixed cost (planning, offsets, the store's and the sinks'
-- protocol), which they do not. NULL where unknown (epochs made before, replays).
ALTER TABLE epochs ADD COLUMN work_ms DOUBLE PRECISION;
