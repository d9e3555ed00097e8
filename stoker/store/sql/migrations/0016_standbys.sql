-- Warm standby drivers (issue 24): a second driver process kept for a job, with its app
-- imported, its SparkSession up and its plan analyzed, holding no attempt. One per job. The
-- leader hands it the job's next attempt when the running driver dies (WARMING -> READY ->
-- TAKEN); it renews its own lease while it waits, so a standby that froze or died is seen
-- and replaced.
CREATE TABLE standbys (
    job_id           TEXT PRIMARY KEY,
    state            TEXT NOT NULL,              -- WARMING, READY, TAKEN
    host             TEXT NOT NULL,
    pid              INTEGER NOT NULL,
    pid_started      TEXT NOT NULL,
    attempt          INTEGER,                    -- TAKEN: the attempt handed to it
    log_path         TEXT NOT NULL,
    started_at       DOUBLE PRECISION NOT NULL,
    ready_at         DOUBLE PRECISION,
    lease_expires_at DOUBLE PRECISION NOT NULL
);
