-- Zero-downtime upgrades (issue 24). A job may have two standby drivers at once: its own
-- ('standby', running the job's code) and an upgrade's ('upgrade', running the new code until
-- the swap), so a standby is keyed by (job, role). ``spec_key`` names the code a standby runs
-- (its job's spec then): a standby of the old code is kept for a rollback while the new code
-- is watched, and replaced once the upgrade is confirmed.
CREATE TABLE standbys_by_role (
    job_id           TEXT NOT NULL,
    role             TEXT NOT NULL,              -- standby, upgrade
    state            TEXT NOT NULL,              -- WARMING, READY, TAKEN
    host             TEXT NOT NULL,
    pid              INTEGER NOT NULL,
    pid_started      TEXT NOT NULL,
    attempt          INTEGER,
    log_path         TEXT NOT NULL,
    started_at       DOUBLE PRECISION NOT NULL,
    ready_at         DOUBLE PRECISION,
    lease_expires_at DOUBLE PRECISION NOT NULL,
    spec_key         TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, role)
);
INSERT INTO standbys_by_role (job_id, role, state, host, pid, pid_started, attempt, log_path,
                              started_at, ready_at, lease_expires_at, spec_key)
SELECT job_id, 'standby', state, host, pid, pid_started, attempt, log_path, started_at,
       ready_at, lease_expires_at, ''
FROM standbys;
DROP TABLE standbys;
ALTER TABLE standbys_by_role RENAME TO standbys;

-- An upgrade of a running job to new code: PENDING (the new code warms and is checked; the
-- running driver is asked to stop at an epoch boundary once it is ready) -> SWAPPED (the new
-- code runs; watched) -> CONFIRMED | ROLLED_BACK, or REFUSED (a check failed, or the new code
-- was lost before the swap: the old code runs on). At most one live (PENDING, SWAPPED) per job.
CREATE TABLE upgrades (
    upgrade_id     TEXT PRIMARY KEY,
    job_id         TEXT NOT NULL,
    state          TEXT NOT NULL,
    old_spec       TEXT NOT NULL,                -- JSON: the job's spec before the upgrade
    new_spec       TEXT NOT NULL,                -- JSON: the job's spec once swapped
    watch_epochs   INTEGER NOT NULL,
    watch_seconds  DOUBLE PRECISION NOT NULL,
    checks         TEXT NOT NULL,                -- JSON: what was checked, and found
    detail         TEXT,                         -- why it was refused or rolled back
    created_at     DOUBLE PRECISION NOT NULL,
    stop_attempt   INTEGER,                      -- the old code's attempt asked to stop
    stop_at        DOUBLE PRECISION,
    swap_attempt   INTEGER,                      -- the new code's first attempt
    swapped_at     DOUBLE PRECISION,
    ended_at       DOUBLE PRECISION
);
CREATE INDEX upgrades_by_job ON upgrades (job_id, created_at);
CREATE UNIQUE INDEX upgrades_live ON upgrades (job_id) WHERE state IN ('PENDING', 'SWAPPED');
