-- stoker store schema, version 1. Portable between SQLite and PostgreSQL:
-- times are seconds since the epoch (DOUBLE PRECISION), documents are JSON text.

CREATE TABLE jobs (
    job_id           TEXT PRIMARY KEY,          -- one id, one job: this key decides duplicates
    name             TEXT NOT NULL,
    state            TEXT NOT NULL,
    spec             TEXT NOT NULL,             -- JSON: what was submitted
    current_attempt  BIGINT NOT NULL DEFAULT 0, -- the fencing token of the owning attempt
    control_version  BIGINT NOT NULL DEFAULT 0, -- latest control version
    last_error       TEXT,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL
);

CREATE TABLE attempts (
    job_id            TEXT NOT NULL REFERENCES jobs (job_id),
    attempt           BIGINT NOT NULL,
    state             TEXT NOT NULL,
    host              TEXT NOT NULL,
    pid               BIGINT NOT NULL,
    pid_started       TEXT NOT NULL,             -- process start marker, guards against pid reuse
    lease_expires_at  DOUBLE PRECISION NOT NULL,
    started_at        DOUBLE PRECISION NOT NULL,
    ended_at          DOUBLE PRECISION,
    error             TEXT,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE control_versions (
    job_id      TEXT NOT NULL REFERENCES jobs (job_id),
    version     BIGINT NOT NULL,
    config      TEXT NOT NULL,                   -- JSON: the whole user config at this version
    reason      TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (job_id, version)
);

CREATE TABLE epochs (
    job_id           TEXT NOT NULL REFERENCES jobs (job_id),
    epoch            BIGINT NOT NULL,
    control_version  BIGINT NOT NULL,            -- pinned on first sight, reused on replay
    state            TEXT NOT NULL,              -- PINNED -> DECIDED -> COMMITTED
    pinned_by        BIGINT NOT NULL,
    decided_by       BIGINT,                     -- the attempt whose prepared parts are the epoch
    rows_in          BIGINT,
    final            BIGINT NOT NULL DEFAULT 0,  -- 1 when every source had finished
    pinned_at        DOUBLE PRECISION NOT NULL,
    decided_at       DOUBLE PRECISION,
    committed_at     DOUBLE PRECISION,
    PRIMARY KEY (job_id, epoch)
);

CREATE TABLE sink_txns (
    job_id      TEXT NOT NULL REFERENCES jobs (job_id),
    epoch       BIGINT NOT NULL,
    sink        TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    state       TEXT NOT NULL,                   -- PREPARED -> COMMITTED | ABORTED
    detail      TEXT NOT NULL,                   -- JSON: what the sink needs to finish it
    updated_at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (job_id, epoch, sink, attempt)
);

CREATE INDEX epochs_by_state ON epochs (job_id, state);
CREATE INDEX sink_txns_by_state ON sink_txns (job_id, state);
