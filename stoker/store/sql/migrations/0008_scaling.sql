-- Scaling (issue 11): what an owner of executors (a lone job or an application) is set to do,
-- what its driver reports it has, what each epoch cost, and every rescale. Portable as the
-- earlier ones: JSON documents are TEXT, times DOUBLE PRECISION.

-- The owner's scaling spec (ScalingSpec.to_dict() as JSON); NULL is mode fixed.
ALTER TABLE jobs ADD COLUMN scaling TEXT;
-- The executor count the scaler wants for the owner; NULL while none is set.
ALTER TABLE jobs ADD COLUMN executor_target BIGINT;
-- JSON the driver reports (executors, cores, executor_ids, hosts, requested, at). Written
-- every few seconds by a running driver, so it never moves updated_at.
ALTER TABLE jobs ADD COLUMN resources TEXT;

-- What each epoch cost and what was left behind it; NULL where unknown (epochs made before).
ALTER TABLE epochs ADD COLUMN duration_ms DOUBLE PRECISION;   -- Spark's triggerExecution
ALTER TABLE epochs ADD COLUMN backlog BIGINT;                 -- rows/files beyond its end
ALTER TABLE epochs ADD COLUMN executors BIGINT;               -- at its end
ALTER TABLE epochs ADD COLUMN cores BIGINT;                   -- at its end

-- The scaler reads an owner's epochs committed within its window every second or so.
CREATE INDEX epochs_by_commit ON epochs (job_id, committed_at);

-- One row per scaling decision (kind 'decision': decided -> in_use | failed | superseded),
-- observed change of executors ('observed') or bounds set by a user ('bounds': recorded).
-- rescale_id comes from the 'rescales' counter, bumped in the inserting transaction: neither
-- dialect's own sequence syntax is portable, and the counter row serialises the rare inserts.
CREATE TABLE rescales (
    rescale_id      BIGINT PRIMARY KEY,
    job_id          TEXT NOT NULL REFERENCES jobs (job_id),   -- the owner
    at              DOUBLE PRECISION NOT NULL,
    kind            TEXT NOT NULL,
    policy          TEXT NOT NULL,
    mode            TEXT NOT NULL,
    signals         TEXT NOT NULL,                 -- JSON: what the decision was made from
    from_executors  BIGINT,
    to_executors    BIGINT,
    workers         TEXT NOT NULL,                 -- JSON: {"added": [ids], "removed": [ids]}
    reason          TEXT NOT NULL,
    status          TEXT NOT NULL,
    in_use_at       DOUBLE PRECISION,
    error           TEXT,
    sender          TEXT
);
CREATE INDEX rescales_by_job ON rescales (job_id, at);

INSERT INTO counters (name, value) VALUES ('rescales', 0);
