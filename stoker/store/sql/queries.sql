-- Named queries shared by both backends. Parameters are written :name; the PostgreSQL backend
-- rewrites them to its own style. A backend may override a query in queries.<dialect>.sql.

-- name: insert_job
INSERT INTO jobs (job_id, name, state, spec, current_attempt, control_version, created_at, updated_at)
VALUES (:job_id, :name, :state, :spec, 0, 0, :now, :now)
ON CONFLICT (job_id) DO NOTHING;

-- name: get_job
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at
FROM jobs WHERE job_id = :job_id;

-- name: lock_job
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at
FROM jobs WHERE job_id = :job_id;

-- name: list_jobs
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at
FROM jobs ORDER BY created_at, job_id;

-- name: set_job_state
UPDATE jobs SET state = :state, last_error = :error, updated_at = :now WHERE job_id = :job_id;

-- name: set_job_spec
UPDATE jobs SET spec = :spec, updated_at = :now WHERE job_id = :job_id;

-- name: set_current_attempt
UPDATE jobs SET current_attempt = :attempt, state = :state, last_error = NULL, updated_at = :now
WHERE job_id = :job_id AND current_attempt = :expected;

-- name: insert_attempt
INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at)
VALUES (:job_id, :attempt, :state, :host, :pid, :pid_started, :lease_expires_at, :now);

-- name: get_attempt
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error
FROM attempts WHERE job_id = :job_id AND attempt = :attempt;

-- name: list_attempts
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error
FROM attempts WHERE job_id = :job_id ORDER BY attempt;

-- name: renew_lease
UPDATE attempts SET lease_expires_at = :lease_expires_at
WHERE job_id = :job_id AND attempt = :attempt AND state = 'RUNNING'
  AND lease_expires_at > :now
  AND attempt = (SELECT current_attempt FROM jobs WHERE job_id = :job_id);

-- name: end_attempt
UPDATE attempts SET state = :state, error = :error, ended_at = :now, lease_expires_at = :now
WHERE job_id = :job_id AND attempt = :attempt AND state = 'RUNNING';

-- name: insert_control_version
INSERT INTO control_versions (job_id, version, config, reason, created_at)
VALUES (:job_id, :version, :config, :reason, :now);

-- name: set_control_version
UPDATE jobs SET control_version = :version, updated_at = :now WHERE job_id = :job_id;

-- name: get_control_version
SELECT version, config FROM control_versions WHERE job_id = :job_id AND version = :version;

-- name: pin_epoch
INSERT INTO epochs (job_id, epoch, control_version, state, pinned_by, pinned_at)
VALUES (:job_id, :epoch, :control_version, 'PINNED', :attempt, :now)
ON CONFLICT (job_id, epoch) DO NOTHING;

-- name: get_epoch
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at
FROM epochs WHERE job_id = :job_id AND epoch = :epoch;

-- name: list_epochs
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at
FROM epochs WHERE job_id = :job_id ORDER BY epoch DESC LIMIT :limit;

-- name: list_epochs_in_state
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at
FROM epochs WHERE job_id = :job_id AND state = :state ORDER BY epoch;

-- name: decide_epoch
-- The commit point. The fence is part of the same statement: only the job's current attempt,
-- with a live lease, turns PINNED into DECIDED.
UPDATE epochs SET state = 'DECIDED', decided_by = :attempt, rows_in = :rows_in, final = :final,
                  decided_at = :now
WHERE job_id = :job_id AND epoch = :epoch AND state = 'PINNED'
  AND EXISTS (
      SELECT 1 FROM jobs j JOIN attempts a ON a.job_id = j.job_id AND a.attempt = j.current_attempt
      WHERE j.job_id = :job_id AND j.current_attempt = :attempt
        AND a.state = 'RUNNING' AND a.lease_expires_at > :now);

-- name: commit_epoch
UPDATE epochs SET state = 'COMMITTED', committed_at = :now
WHERE job_id = :job_id AND epoch = :epoch AND state = 'DECIDED';

-- name: upsert_txn
INSERT INTO sink_txns (job_id, epoch, sink, attempt, state, detail, updated_at)
VALUES (:job_id, :epoch, :sink, :attempt, :state, :detail, :now)
ON CONFLICT (job_id, epoch, sink, attempt)
DO UPDATE SET state = excluded.state, detail = excluded.detail, updated_at = excluded.updated_at;

-- name: list_txns
SELECT job_id, epoch, sink, attempt, state, detail, updated_at
FROM sink_txns WHERE job_id = :job_id ORDER BY epoch, sink, attempt;

-- name: list_txns_in_state
SELECT job_id, epoch, sink, attempt, state, detail, updated_at
FROM sink_txns WHERE job_id = :job_id AND state = :state ORDER BY epoch, sink, attempt;
