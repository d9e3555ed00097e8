-- Applications and clusters (issue 10). Portable as the earlier ones: JSON documents are TEXT,
-- times DOUBLE PRECISION.

-- What a record supervises: 'job' (one pipeline) or 'application' (a user program's driver).
-- Both share one id space, the states and the attempts; records made before are jobs.
ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'job';
-- The application whose driver runs this job; NULL for a job submitted alone (and for an
-- application). The key of every lookup of an application's jobs.
ALTER TABLE jobs ADD COLUMN app_id TEXT;
CREATE INDEX jobs_by_app ON jobs (app_id);

-- The application attempt whose driver made this job attempt; NULL when the job's driver is
-- its own. Renewals and decisions of the job attempt hold only while it is the application's
-- current attempt: a zombie driver decides nothing once a newer one started.
ALTER TABLE attempts ADD COLUMN app_attempt BIGINT;

-- Spark standalone clusters stoker started: one per application that asked for one ('app',
-- owner_app set, torn down when it ends) and the session clusters ('session') that outlive
-- applications. STARTING -> RUNNING -> STOPPING -> STOPPED, or FAILED (CLUSTER_TRANSITIONS).
CREATE TABLE clusters (
    name        TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,                   -- 'app' | 'session'
    owner_app   TEXT,                            -- the application of an 'app' cluster
    spec        TEXT NOT NULL,                   -- JSON: what was asked for
    state       TEXT NOT NULL,
    master_url  TEXT,
    web_url     TEXT,
    processes   TEXT NOT NULL DEFAULT '[]',      -- JSON: every master and worker process
    error       TEXT,
    created_at  DOUBLE PRECISION NOT NULL,
    updated_at  DOUBLE PRECISION NOT NULL
);
