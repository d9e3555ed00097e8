-- Named queries shared by both backends. Parameters are written :name; the PostgreSQL backend
-- rewrites them to its own style. A backend may override a query in queries.<dialect>.sql.

-- name: insert_job
INSERT INTO jobs (job_id, name, state, spec, current_attempt, control_version, created_at, updated_at)
VALUES (:job_id, :name, :state, :spec, 0, 0, :now, :now)
ON CONFLICT (job_id) DO NOTHING;

-- name: get_job
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at
FROM jobs WHERE job_id = :job_id;

-- name: lock_job
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at
FROM jobs WHERE job_id = :job_id;

-- name: list_jobs
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at
FROM jobs ORDER BY created_at, job_id;

-- name: set_job_state
UPDATE jobs SET state = :state, last_error = :error, updated_at = :now WHERE job_id = :job_id;

-- name: set_job_spec
UPDATE jobs SET spec = :spec, updated_at = :now WHERE job_id = :job_id;

-- name: set_current_attempt
UPDATE jobs SET current_attempt = :attempt, state = :state, last_error = NULL, updated_at = :now
WHERE job_id = :job_id AND current_attempt = :expected;

-- name: insert_attempt
INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at,
                      log_path)
VALUES (:job_id, :attempt, :state, :host, :pid, :pid_started, :lease_expires_at, :now, :log_path);

-- name: get_attempt
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path
FROM attempts WHERE job_id = :job_id AND attempt = :attempt;

-- name: list_attempts
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path
FROM attempts WHERE job_id = :job_id ORDER BY attempt;

-- name: renew_lease
UPDATE attempts SET lease_expires_at = :lease_expires_at
WHERE job_id = :job_id AND attempt = :attempt AND state = 'RUNNING'
  AND lease_expires_at > :now
  AND attempt = (SELECT current_attempt FROM jobs WHERE job_id = :job_id);

-- name: end_attempt
UPDATE attempts SET state = :state, error = :error, ended_at = :now, lease_expires_at = :now
WHERE job_id = :job_id AND attempt = :attempt AND state IN ('RUNNING', 'STARTING');

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

-- name: claim_attempt
-- A driver adopts the attempt the manager made for it: only while it is the current one.
UPDATE attempts SET state = 'RUNNING', host = :host, pid = :pid, pid_started = :pid_started,
                    lease_expires_at = :lease_expires_at
WHERE job_id = :job_id AND attempt = :attempt AND state = 'STARTING'
  AND attempt = (SELECT current_attempt FROM jobs WHERE job_id = :job_id);

-- name: set_attempt_owner
UPDATE attempts SET host = :host, pid = :pid, pid_started = :pid_started
WHERE job_id = :job_id AND attempt = :attempt;

-- name: request_cancel
UPDATE jobs SET state = :state, cancel_requested_at = :now, updated_at = :now
WHERE job_id = :job_id;

-- name: set_failures
UPDATE jobs SET failures = :failures, next_attempt_at = :next_attempt_at, updated_at = :now
WHERE job_id = :job_id;

-- name: get_leader
SELECT name, holder, address, token, expires_at FROM leader_lease WHERE name = 'leader';

-- name: insert_leader
INSERT INTO leader_lease (name, holder, address, token, expires_at)
VALUES ('leader', :holder, :address, 1, :expires_at)
ON CONFLICT (name) DO NOTHING;

-- name: take_leader
-- Taken only when free (expired) or already ours; a new holder gets a higher token.
UPDATE leader_lease
SET token = CASE WHEN holder = :holder THEN token ELSE token + 1 END,
    holder = :holder, address = :address, expires_at = :expires_at
WHERE name = 'leader' AND (expires_at <= :now OR holder = :holder);

-- name: renew_leader
UPDATE leader_lease SET expires_at = :expires_at
WHERE name = 'leader' AND holder = :holder AND token = :token AND expires_at > :now;

-- name: resign_leader
UPDATE leader_lease SET expires_at = :now
WHERE name = 'leader' AND holder = :holder AND token = :token;

-- name: check_leader
SELECT 1 FROM leader_lease
WHERE name = 'leader' AND holder = :holder AND token = :token AND expires_at > :now;

-- name: count_attempts
SELECT COUNT(*) FROM attempts;

-- name: count_committed_epochs
SELECT COUNT(*) FROM epochs WHERE state = 'COMMITTED';

-- name: restart_job
UPDATE jobs SET state = 'RESTARTING', spec = :spec, failures = 0, next_attempt_at = NULL,
                cancel_requested_at = NULL, last_error = NULL, updated_at = :now
WHERE job_id = :job_id;

-- name: fail_job_attempt
UPDATE jobs SET state = :state, failures = :failures, next_attempt_at = :next_attempt_at,
                last_error = :error, updated_at = :now
WHERE job_id = :job_id;
