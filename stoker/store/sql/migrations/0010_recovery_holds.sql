-- Who resolves a job's leftover sink parts right now (recovery: at an attempt's start, at its
-- end, or the janitor's cleanup). At most one row per job. Recovery aborts every undecided part
-- it finds, so it must not overlap the next attempt's epochs: the next attempt takes this hold
-- before its own recovery and its query, waiting while a live holder keeps it. A holder that
-- stops renewing (frozen, partitioned) loses it at expires_at; one provably dead at once.
CREATE TABLE recovery_holds (
    job_id      TEXT PRIMARY KEY,
    attempt     BIGINT NOT NULL,                 -- the attempt whose leftovers it resolves
    host        TEXT NOT NULL,                   -- the process that holds it
    pid         BIGINT NOT NULL,
    pid_started TEXT NOT NULL,
    expires_at  DOUBLE PRECISION NOT NULL
);
