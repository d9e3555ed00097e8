-- Named queries shared by both backends. Parameters are written :name; the PostgreSQL backend
-- rewrites them to its own style. A backend may override a query in queries.<dialect>.sql.

-- name: insert_job
INSERT INTO jobs (job_id, name, state, spec, current_attempt, control_version, created_at, updated_at,
                  uid, kind, app_id)
VALUES (:job_id, :name, :state, :spec, 0, 0, :now, :now, :uid, :kind, :app_id)
ON CONFLICT (job_id) DO NOTHING;

-- name: get_job
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs WHERE job_id = :job_id;

-- name: lock_job
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs WHERE job_id = :job_id;

-- name: share_job
-- lock_job for readers that may hold it together (PostgreSQL: FOR SHARE).
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs WHERE job_id = :job_id;

-- name: list_jobs
-- Filters given as NULL match everything (the CASTs give PostgreSQL the parameters' types).
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs
WHERE (CAST(:state AS TEXT) IS NULL OR state = CAST(:state AS TEXT))
  AND (CAST(:kind AS TEXT) IS NULL OR kind = CAST(:kind AS TEXT))
  AND (CAST(:app_id AS TEXT) IS NULL OR app_id = CAST(:app_id AS TEXT))
ORDER BY created_at, job_id;

-- name: list_jobs_page
-- One page of a kind's records in (created_at, job_id) order, after the cursor (NULLs: from
-- the start), through jobs_by_created.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs
WHERE kind = :kind
  AND (CAST(:state AS TEXT) IS NULL OR state = CAST(:state AS TEXT))
  AND (CAST(:after_at AS DOUBLE PRECISION) IS NULL
       OR created_at > CAST(:after_at AS DOUBLE PRECISION)
       OR (created_at = CAST(:after_at AS DOUBLE PRECISION) AND job_id > CAST(:after_id AS TEXT)))
ORDER BY created_at, job_id
LIMIT :limit;

-- name: list_unsettled_jobs
-- Ended jobs whose sinks the janitor may still owe a cleanup: never resolved, or resolved
-- within :settle seconds of their last change. Filtered here, not in the manager: a store with
-- 10,000 ended jobs returns the few that matter instead of every row each second.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs
WHERE kind = 'job' AND state IN ('FINISHED', 'CANCELED', 'FAILED')
  AND settled = 0 AND (resolved_at IS NULL OR resolved_at < updated_at + :settle)
ORDER BY updated_at, job_id;

-- name: list_live_jobs
-- Every record that has not ended, jobs and applications (through the jobs_by_state index).
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs
WHERE state IN ('CREATED', 'RUNNING', 'RESTARTING', 'CANCELING', 'SUSPENDED', 'FAILING')
ORDER BY created_at, job_id;

-- name: live_attempts
-- The current attempts of the records list_live_jobs returns, read in its transaction: the
-- leader's tick judges every live driver from one read, not one transaction per job.
SELECT a.job_id, a.attempt, a.state, a.host, a.pid, a.pid_started, a.lease_expires_at,
       a.started_at, a.ended_at, a.error, a.log_path, a.app_attempt, a.renewals, a.lease_ttl,
       a.cause
FROM jobs j JOIN attempts a ON a.job_id = j.job_id AND a.attempt = j.current_attempt
WHERE j.state IN ('CREATED', 'RUNNING', 'RESTARTING', 'CANCELING', 'SUSPENDED', 'FAILING');

-- name: set_job_state
-- Entering a terminal state makes the resolution of the job's sinks owed (resolved_at NULL).
UPDATE jobs SET state = :state, last_error = :error, updated_at = :now,
                resolved_at = CASE WHEN :state IN ('FINISHED', 'CANCELED', 'FAILED')
                                   THEN NULL ELSE resolved_at END,
                settled = CASE WHEN :state IN ('FINISHED', 'CANCELED', 'FAILED')
                               THEN 0 ELSE settled END
WHERE job_id = :job_id;

-- name: set_resolved
UPDATE jobs SET resolved_at = :now WHERE job_id = :job_id;

-- name: set_settled
-- Only the end the janitor looked at: a job that ended again since is not settled by it.
UPDATE jobs SET settled = 1
WHERE job_id = :job_id AND updated_at = :ended_at AND resolved_at IS NOT NULL
  AND state IN ('FINISHED', 'CANCELED', 'FAILED');

-- name: unsettled_page
-- A slice of the ended jobs not settled, in (updated_at, job_id) order after the cursor
-- (NULLs: from the first), through jobs_unsettled (migration 0021): the janitor's walk, a few
-- rows a tick. Unlike list_unsettled_jobs, a job resolved past its grace is returned too: the
-- janitor settles it (it owes it nothing), and it leaves the index.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs
WHERE settled = 0 AND kind = 'job' AND state IN ('FINISHED', 'CANCELED', 'FAILED')
  AND (CAST(:after_at AS DOUBLE PRECISION) IS NULL
       OR updated_at > CAST(:after_at AS DOUBLE PRECISION)
       OR (updated_at = CAST(:after_at AS DOUBLE PRECISION) AND job_id > CAST(:after_id AS TEXT)))
ORDER BY updated_at, job_id
LIMIT :limit;

-- name: unsettled_attempts
-- The attempts of the jobs unsettled_page returns for the same cursor and limit, read in its
-- transaction: the janitor judges a slice from two reads, not one more per job.
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path, app_attempt, renewals, lease_ttl, cause
FROM attempts
WHERE job_id IN (
    SELECT job_id FROM jobs
    WHERE settled = 0 AND kind = 'job' AND state IN ('FINISHED', 'CANCELED', 'FAILED')
      AND (CAST(:after_at AS DOUBLE PRECISION) IS NULL
           OR updated_at > CAST(:after_at AS DOUBLE PRECISION)
           OR (updated_at = CAST(:after_at AS DOUBLE PRECISION)
               AND job_id > CAST(:after_id AS TEXT)))
    ORDER BY updated_at, job_id
    LIMIT :limit)
ORDER BY job_id, attempt;

-- name: settle_end
-- The janitor owes this end of the job no cleanup: not its to clean (a `stoker run` job), or
-- resolved for good; with :resolve = 1 (no driver ever ran: nothing can be prepared) resolved
-- now as well. Only the end it looked at: a job that ended again since is left unsettled.
UPDATE jobs SET settled = 1,
                resolved_at = CASE WHEN :resolve = 1 THEN :now ELSE resolved_at END
WHERE job_id = :job_id AND updated_at = :ended_at
  AND state IN ('FINISHED', 'CANCELED', 'FAILED');

-- name: set_job_sinks
UPDATE jobs SET sinks = :sinks WHERE job_id = :job_id;

-- name: get_job_sinks
SELECT sinks FROM jobs WHERE job_id = :job_id;

-- name: get_txn
SELECT job_id, epoch, sink, attempt, state, detail, updated_at
FROM sink_txns WHERE job_id = :job_id AND epoch = :epoch AND sink = :sink AND attempt = :attempt;

-- name: set_job_spec
UPDATE jobs SET spec = :spec, updated_at = :now WHERE job_id = :job_id;

-- name: set_current_attempt
UPDATE jobs SET current_attempt = :attempt, state = :state, last_error = NULL, updated_at = :now
WHERE job_id = :job_id AND current_attempt = :expected;

-- name: insert_attempt
INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at,
                      log_path, app_attempt, lease_ttl)
VALUES (:job_id, :attempt, :state, :host, :pid, :pid_started, :lease_expires_at, :now, :log_path,
        :app_attempt, :lease_ttl);

-- name: get_attempt
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path, app_attempt, renewals, lease_ttl, cause
FROM attempts WHERE job_id = :job_id AND attempt = :attempt;

-- name: list_attempts
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path, app_attempt, renewals, lease_ttl, cause
FROM attempts WHERE job_id = :job_id ORDER BY attempt;

-- name: renew_lease
-- An attempt made by an application's driver renews only while that driver's attempt is still
-- the application's current one: one statement, and no extra read for a job's own driver.
-- A STARTING attempt renews too: its driver holds it while Spark comes up (hold_start).
-- No wall-clock test: the attempt number is the fence, and whether a lease lapsed is judged by
-- its observers on their own monotonic clocks from the renewals they see (migration 0018).
UPDATE attempts SET lease_expires_at = :lease_expires_at, lease_ttl = :lease_ttl,
                    renewals = renewals + 1
WHERE job_id = :job_id AND attempt = :attempt AND state IN ('STARTING', 'RUNNING')
  AND attempt = (SELECT current_attempt FROM jobs WHERE job_id = :job_id)
  AND (app_attempt IS NULL
       OR app_attempt = (SELECT p.current_attempt FROM jobs j JOIN jobs p ON p.job_id = j.app_id
                         WHERE j.job_id = :job_id));

-- name: lock_attempt
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path, app_attempt, renewals, lease_ttl, cause
FROM attempts WHERE job_id = :job_id AND attempt = :attempt;

-- name: end_attempt
-- :from_state is the state read (locked) in this transaction and checked against
-- ATTEMPT_TRANSITIONS (types.py): the table, not this query, says which moves are allowed.
UPDATE attempts SET state = :state, error = :error, ended_at = :now, lease_expires_at = :now,
       cause = :cause
WHERE job_id = :job_id AND attempt = :attempt AND state = :from_state;

-- name: note_main_raised
-- An application's program raised: said on its live attempt, which stays live (its driver
-- keeps the jobs running until the job manager's strategy has decided).
UPDATE attempts SET error = :error, cause = :cause
WHERE job_id = :job_id AND attempt = :attempt AND state IN ('STARTING', 'RUNNING');

-- name: insert_control_version
INSERT INTO control_versions (job_id, version, config, state, reason, created_at)
VALUES (:job_id, :version, :config, :state, :reason, :now);

-- name: set_control_version
UPDATE jobs SET control_version = :version, updated_at = :now WHERE job_id = :job_id;

-- name: set_control_state
-- Only the pipeline's description changes in place: no epoch reads it.
UPDATE control_versions SET state = :state WHERE job_id = :job_id AND version = :version;

-- name: get_control_version
SELECT version, config, state FROM control_versions WHERE job_id = :job_id AND version = :version;

-- name: pin_epoch
INSERT INTO epochs (job_id, epoch, control_version, state, pinned_by, pinned_at)
VALUES (:job_id, :epoch, :control_version, 'PINNED', :attempt, :now)
ON CONFLICT (job_id, epoch) DO NOTHING;

-- name: get_epoch
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at, duration_ms, backlog, executors, cores, work_ms,
       progress
FROM epochs WHERE job_id = :job_id AND epoch = :epoch;

-- name: list_epochs
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at, duration_ms, backlog, executors, cores, work_ms,
       progress
FROM epochs WHERE job_id = :job_id ORDER BY epoch DESC LIMIT :limit;

-- name: list_epochs_before
-- A page of the list, newest first, below the epoch a client has seen (its cursor).
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at, duration_ms, backlog, executors, cores, work_ms,
       progress
FROM epochs WHERE job_id = :job_id AND epoch < :before ORDER BY epoch DESC LIMIT :limit;

-- name: decided_range
-- The oldest and newest epoch the store decided (DECIDED or COMMITTED) for the job; NULLs for none.
SELECT MIN(epoch), MAX(epoch) FROM epochs
WHERE job_id = :job_id AND state IN ('DECIDED', 'COMMITTED');

-- name: reset_txns
DELETE FROM sink_txns WHERE job_id = :job_id;

-- name: reset_epochs
DELETE FROM epochs WHERE job_id = :job_id;

-- name: set_job_uid
UPDATE jobs SET uid = :uid, updated_at = :now WHERE job_id = :job_id;

-- name: list_epochs_in_state
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at, duration_ms, backlog, executors, cores, work_ms,
       progress
FROM epochs WHERE job_id = :job_id AND state = :state ORDER BY epoch;

-- name: decide_epoch
-- The commit point. The fence is part of the same statement: only the job's current attempt,
-- with a live lease, turns the epoch (:from_state, read and checked against EPOCH_TRANSITIONS)
-- into DECIDED; an attempt made by an application's driver only while that driver's attempt is
-- the application's current one (the subquery is not reached for a job's own driver).
UPDATE epochs SET state = 'DECIDED', decided_by = :attempt, rows_in = :rows_in, final = :final,
                  decided_at = :now
WHERE job_id = :job_id AND epoch = :epoch AND state = :from_state
  AND EXISTS (
      SELECT 1 FROM jobs j JOIN attempts a ON a.job_id = j.job_id AND a.attempt = j.current_attempt
      WHERE j.job_id = :job_id AND j.current_attempt = :attempt
        AND a.state = 'RUNNING'
        AND (a.app_attempt IS NULL
             OR EXISTS (SELECT 1 FROM jobs p
                        WHERE p.job_id = j.app_id AND p.current_attempt = a.app_attempt)));

-- name: commit_epoch
UPDATE epochs SET state = 'COMMITTED', committed_at = :now
WHERE job_id = :job_id AND epoch = :epoch AND state = :from_state;

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
                    lease_expires_at = :lease_expires_at, lease_ttl = :lease_ttl,
                    renewals = renewals + 1
WHERE job_id = :job_id AND attempt = :attempt AND state = :from_state
  AND attempt = (SELECT current_attempt FROM jobs WHERE job_id = :job_id);

-- name: hold_start
-- A driver takes the STARTING attempt the manager made for it before its app is imported and
-- Spark starts: its process is the owner, and it renews the lease from now on (it claims the
-- attempt, -> RUNNING, once Spark is up). Only the current attempt, only while its lease holds.
UPDATE attempts SET host = :host, pid = :pid, pid_started = :pid_started,
                    lease_expires_at = :lease_expires_at, lease_ttl = :lease_ttl,
                    renewals = renewals + 1
WHERE job_id = :job_id AND attempt = :attempt AND state = 'STARTING'
  AND attempt = (SELECT current_attempt FROM jobs WHERE job_id = :job_id);

-- name: count_starting
-- Drivers starting now: the current attempts of live records that are still STARTING.
SELECT count(*) FROM jobs j JOIN attempts a ON a.job_id = j.job_id AND a.attempt = j.current_attempt
WHERE j.state IN ('RUNNING', 'CANCELING') AND a.state = 'STARTING';

-- name: set_attempt_owner
UPDATE attempts SET host = :host, pid = :pid, pid_started = :pid_started
WHERE job_id = :job_id AND attempt = :attempt;

-- name: request_cancel
UPDATE jobs SET state = :state, cancel_requested_at = :now, updated_at = :now,
                resolved_at = CASE WHEN :state = 'CANCELED' THEN NULL ELSE resolved_at END,
                settled = CASE WHEN :state = 'CANCELED' THEN 0 ELSE settled END
WHERE job_id = :job_id;

-- name: cancel_with_reason
-- request_cancel with why it was asked for, kept as the job's error until it ends CANCELED.
UPDATE jobs SET state = :state, cancel_requested_at = :now, updated_at = :now, last_error = :why,
                resolved_at = CASE WHEN :state = 'CANCELED' THEN NULL ELSE resolved_at END,
                settled = CASE WHEN :state = 'CANCELED' THEN 0 ELSE settled END
WHERE job_id = :job_id;

-- name: set_failures
UPDATE jobs SET failures = :failures, next_attempt_at = :next_attempt_at, updated_at = :now
WHERE job_id = :job_id;

-- name: get_leader
SELECT name, holder, address, token, expires_at, renewals, ttl FROM leader_lease
WHERE name = 'leader';

-- name: lock_leader
SELECT name, holder, address, token, expires_at, renewals, ttl FROM leader_lease
WHERE name = 'leader';

-- name: insert_leader
INSERT INTO leader_lease (name, holder, address, token, expires_at, renewals, ttl)
VALUES ('leader', :holder, :address, 1, :expires_at, 0, :ttl)
ON CONFLICT (name) DO NOTHING;

-- name: take_leader
-- Whether the lease may be taken (free, ours, or seen unrenewed for a whole TTL by the taker's
-- own monotonic clock) is decided by the caller on the row it locked; a new holder gets a
-- higher token.
UPDATE leader_lease
SET token = CASE WHEN holder = :holder THEN token ELSE token + 1 END,
    holder = :holder, address = :address, expires_at = :expires_at, ttl = :ttl,
    renewals = CASE WHEN holder = :holder AND renewals >= 0 THEN renewals + 1 ELSE 0 END
WHERE name = 'leader';

-- name: renew_leader
-- The token is the fence; no wall-clock test (migration 0018).
UPDATE leader_lease SET expires_at = :expires_at, ttl = :ttl, renewals = renewals + 1
WHERE name = 'leader' AND holder = :holder AND token = :token AND renewals >= 0;

-- name: resign_leader
UPDATE leader_lease SET expires_at = :now, renewals = -1
WHERE name = 'leader' AND holder = :holder AND token = :token;

-- name: check_leader
SELECT 1 FROM leader_lease
WHERE name = 'leader' AND holder = :holder AND token = :token AND renewals >= 0;

-- name: heartbeat_manager
-- Made on a manager's first heartbeat; started_at stays, seen_at moves on every one. The
-- stoker and schema it runs (migration 0020) let a newer manager see it (store/_schema.py).
INSERT INTO managers (holder, address, started_at, seen_at, stoker_version, schema_version)
VALUES (:holder, :address, :now, :now, :stoker_version, :schema_version)
ON CONFLICT (holder) DO UPDATE SET address = excluded.address, seen_at = excluded.seen_at,
    stoker_version = excluded.stoker_version, schema_version = excluded.schema_version;

-- name: prune_managers
DELETE FROM managers WHERE seen_at < :before;

-- name: forget_manager
DELETE FROM managers WHERE holder = :holder;

-- name: list_managers
SELECT holder, address, started_at, seen_at, stoker_version, schema_version FROM managers
WHERE seen_at >= :since ORDER BY started_at, holder;

-- name: restart_job
UPDATE jobs SET state = 'RESTARTING', spec = :spec, failures = 0, next_attempt_at = NULL,
                cancel_requested_at = NULL, last_error = NULL, updated_at = :now
WHERE job_id = :job_id;

-- name: fail_job_attempt
UPDATE jobs SET state = :state, failures = :failures, next_attempt_at = :next_attempt_at,
                last_error = :error, updated_at = :now,
                resolved_at = CASE WHEN :state IN ('FINISHED', 'CANCELED', 'FAILED')
                                   THEN NULL ELSE resolved_at END,
                settled = CASE WHEN :state IN ('FINISHED', 'CANCELED', 'FAILED')
                               THEN 0 ELSE settled END
WHERE job_id = :job_id;

-- Counters (migration 0004): totals that pruning never lowers, read in one indexed scan.

-- name: bump_counter
UPDATE counters SET value = value + :n WHERE name = :name;

-- name: get_counters
SELECT name, value FROM counters;

-- name: count_jobs_by_state
-- Every record by kind and state, for /metrics: counts, not rows (the ended ones stay out of
-- the scrape's rows; list_live_jobs gives it the live ones).
SELECT kind, state, COUNT(*) FROM jobs GROUP BY kind, state;

-- Retention (_retention.py). An epoch may go only if it is COMMITTED, not final, has no
-- PREPARED sink transaction, is at or below :upto (the latest epoch is above it) and was
-- committed before :before. The deletes repeat the whole test: it is what keeps them safe.

-- name: max_epoch
SELECT MAX(epoch) FROM epochs WHERE job_id = :job_id;

-- name: prunable_epochs
SELECT e.epoch FROM epochs e
WHERE e.job_id = :job_id AND e.epoch > :after AND e.epoch <= :upto
  AND e.state = 'COMMITTED' AND e.final = 0 AND e.committed_at < :before
  AND NOT EXISTS (SELECT 1 FROM sink_txns t
                  WHERE t.job_id = e.job_id AND t.epoch = e.epoch AND t.state = 'PREPARED')
ORDER BY e.epoch LIMIT :limit;

-- name: prune_txns
-- Run after prune_epochs, in its transaction: the records of the batch's epochs that are gone.
-- A primary-key probe per row whatever the planner knows (an IN (subquery) here ran as a
-- nested loop, quadratic in the batch, on tables not analyzed yet).
DELETE FROM sink_txns
WHERE job_id = :job_id AND epoch >= :lo AND epoch <= :hi AND state <> 'PREPARED'
  AND NOT EXISTS (SELECT 1 FROM epochs e
                  WHERE e.job_id = sink_txns.job_id AND e.epoch = sink_txns.epoch);

-- name: prune_epochs
DELETE FROM epochs
WHERE job_id = :job_id AND epoch >= :lo AND epoch <= :hi AND epoch <= :upto
  AND state = 'COMMITTED' AND final = 0 AND committed_at < :before
  AND NOT EXISTS (SELECT 1 FROM sink_txns p
                  WHERE p.job_id = epochs.job_id AND p.epoch = epochs.epoch
                    AND p.state = 'PREPARED');

-- name: orphan_txn
SELECT 1 FROM sink_txns t
WHERE t.job_id = :job_id AND t.state = 'ABORTED' AND t.epoch <= :upto
  AND NOT EXISTS (SELECT 1 FROM epochs e WHERE e.job_id = t.job_id AND e.epoch = t.epoch)
LIMIT 1;

-- name: prune_orphan_txns
-- An ABORTED record whose epoch is gone: a zombie prepared (and recovery aborted) a part of
-- an epoch pruned before. Found through the (job_id, state) index: there are few.
DELETE FROM sink_txns
WHERE job_id = :job_id AND state = 'ABORTED' AND epoch <= :upto
  AND NOT EXISTS (SELECT 1 FROM epochs e
                  WHERE e.job_id = sink_txns.job_id AND e.epoch = sink_txns.epoch);

-- Control events (migration 0006, sql_control.py). Moves follow CONTROL_TRANSITIONS (types.py):
-- a statement that moves many events at once names the states the table lets it move from.

-- name: insert_control_event
INSERT INTO control_events (job_id, control_id, version, kind, body, status, request_id, sender,
                            origin, created_at)
VALUES (:job_id, :control_id, :version, :kind, :body, 'PENDING', :request_id, :sender, :origin,
        :now);

-- name: get_control_event
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events WHERE job_id = :job_id AND control_id = :control_id;

-- name: lock_control_event
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events WHERE job_id = :job_id AND control_id = :control_id;

-- name: get_control_by_request
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events WHERE job_id = :job_id AND request_id = :request_id;

-- name: list_controls
-- Filters given as NULL match everything (the CASTs give PostgreSQL the parameters' types).
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events
WHERE job_id = :job_id
  AND (CAST(:before AS BIGINT) IS NULL OR version < CAST(:before AS BIGINT))
  AND (CAST(:kind AS TEXT) IS NULL OR kind = CAST(:kind AS TEXT))
  AND (CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT))
ORDER BY version DESC LIMIT :limit;

-- name: applied_controls
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events
WHERE job_id = :job_id AND applied_epoch = :epoch AND status IN ('APPLIED', 'COMMITTED')
ORDER BY version;

-- name: apply_controls
-- Run by every pin, in its transaction (PENDING -> APPLIED): through the (job_id, status) index
-- it finds nothing on almost every epoch. Savepoints are the runtime's to apply.
UPDATE control_events SET status = 'APPLIED', applied_epoch = :epoch, applied_at = :now
WHERE job_id = :job_id AND status = 'PENDING' AND version <= :version AND kind <> 'savepoint';

-- name: commit_controls
-- Run by the epoch's commit, in its transaction (APPLIED -> COMMITTED).
UPDATE control_events SET status = 'COMMITTED', ended_at = :now
WHERE job_id = :job_id AND status = 'APPLIED' AND applied_epoch = :epoch;

-- name: reject_pending_controls
-- The job ended (PENDING -> REJECTED): nothing will apply them any more.
UPDATE control_events SET status = 'REJECTED', reason = :reason, ended_at = :now
WHERE job_id = :job_id AND status = 'PENDING';

-- name: reject_unfinished_controls
-- The job ended (APPLIED -> REJECTED) with the epoch they applied at short of its commit point.
-- Those applied at a DECIDED epoch stay: recovery commits that epoch and, with it, them.
UPDATE control_events SET status = 'REJECTED', ended_at = :now,
    reason = CASE WHEN applied_epoch IS NULL THEN 'the job ended before the event committed'
                  ELSE 'the job ended before epoch ' || CAST(applied_epoch AS TEXT)
                       || ' committed' END
WHERE job_id = :job_id AND status = 'APPLIED'
  AND NOT EXISTS (SELECT 1 FROM epochs e
                  WHERE e.job_id = control_events.job_id AND e.epoch = control_events.applied_epoch
                    AND e.state IN ('DECIDED', 'COMMITTED'));

-- name: open_controls
-- The events a job's end may reject (PENDING, APPLIED), before it does.
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events WHERE job_id = :job_id AND status IN ('PENDING', 'APPLIED') ORDER BY version;

-- name: controls_after
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events WHERE job_id = :job_id AND version > :version ORDER BY version;

-- name: control_versions_after
SELECT version, config, state, reason FROM control_versions
WHERE job_id = :job_id AND version > :version ORDER BY version;

-- name: repin_unfinished_epochs
-- The job ended with these epochs short of their commit point, pinned at a version a rejected
-- event made: a replay after a restart applies the version that undid it instead.
UPDATE epochs SET control_version = :version
WHERE job_id = :job_id AND state = 'PINNED' AND control_version > :after;

-- name: reject_control
UPDATE control_events SET status = 'REJECTED', reason = :reason, ended_at = :now
WHERE job_id = :job_id AND control_id = :control_id AND status = :from_state;

-- name: finish_control
-- :from_state was read (locked) and the move checked against CONTROL_TRANSITIONS. A NULL
-- epoch or result keeps what is recorded; ended_at is set on COMMITTED.
UPDATE control_events
SET status = :status,
    applied_epoch = COALESCE(CAST(:epoch AS BIGINT), applied_epoch),
    applied_at = CASE WHEN :status = 'APPLIED' AND :from_state <> 'APPLIED' THEN :now
                      ELSE applied_at END,
    ended_at = CASE WHEN :status = 'COMMITTED' AND :from_state <> 'COMMITTED' THEN :now
                    ELSE ended_at END,
    result = COALESCE(CAST(:result AS TEXT), result)
WHERE job_id = :job_id AND control_id = :control_id AND status = :from_state;

-- Retention of ended control events (_retention.py): the newest :keep ended events of a job
-- stay, and so do the events applied at its latest epoch (a replay of it reads them).

-- name: control_cutoff
SELECT version FROM control_events
WHERE job_id = :job_id AND status IN ('COMMITTED', 'REJECTED')
ORDER BY version DESC LIMIT 1 OFFSET :keep;

-- name: prunable_controls
SELECT version FROM control_events
WHERE job_id = :job_id AND version > :after AND version <= :cutoff
  AND status IN ('COMMITTED', 'REJECTED')
  AND NOT (status = 'COMMITTED' AND applied_epoch IS NOT NULL AND applied_epoch >= :latest)
ORDER BY version LIMIT :limit;

-- name: prune_controls
DELETE FROM control_events
WHERE job_id = :job_id AND version >= :lo AND version <= :hi AND version <= :cutoff
  AND status IN ('COMMITTED', 'REJECTED')
  AND NOT (status = 'COMMITTED' AND applied_epoch IS NOT NULL AND applied_epoch >= :latest);

-- Clusters (migration 0007, sql_clusters.py). Moves follow CLUSTER_TRANSITIONS (types.py).

-- name: insert_cluster
-- :host: the host whose budget it counts against (migration 0024); NULL: not recorded.
INSERT INTO clusters (name, kind, owner_app, spec, state, processes, created_at, updated_at,
                      host)
VALUES (:name, :kind, :owner_app, :spec, :state, '[]', :now, :now, :host)
ON CONFLICT (name) DO NOTHING;

-- name: get_cluster
SELECT name, kind, owner_app, spec, state, master_url, web_url, processes, error, created_at,
       updated_at, host
FROM clusters WHERE name = :name;

-- name: lock_cluster
SELECT name, kind, owner_app, spec, state, master_url, web_url, processes, error, created_at,
       updated_at, host
FROM clusters WHERE name = :name;

-- name: lock_cluster_budget
-- Serializes every check of a host's cluster budget with the record it admits. SQLite's write
-- transaction (BEGIN IMMEDIATE) is serialized already; PostgreSQL takes a lock of its own.
SELECT 1;

-- name: host_clusters
-- What a host's budget counts: the live clusters recorded on it, and those of no host (rows
-- of code before migration 0024, whose host is unknown).
SELECT name, kind, owner_app, spec, state, master_url, web_url, processes, error, created_at,
       updated_at, host
FROM clusters
WHERE state IN ('STARTING', 'RUNNING', 'STOPPING') AND (host = :host OR host IS NULL)
ORDER BY created_at, name;

-- name: list_clusters
SELECT name, kind, owner_app, spec, state, master_url, web_url, processes, error, created_at,
       updated_at, host
FROM clusters WHERE :include_stopped = 1 OR state <> 'STOPPED'
ORDER BY created_at, name;

-- name: update_cluster
-- :from_state was read (locked) and the move checked; the caller passes every column, the
-- unchanged ones as read.
UPDATE clusters SET state = :state, master_url = :master_url, web_url = :web_url,
                    processes = :processes, error = :error, updated_at = :now
WHERE name = :name AND state = :from_state;

-- name: delete_cluster
DELETE FROM clusters WHERE name = :name AND state = 'STOPPED';

-- Scaling (migration 0008, sql_scaling.py). None of these move a job's updated_at: a running
-- driver reports its resources every few seconds.

-- name: set_scaling
UPDATE jobs SET scaling = :scaling WHERE job_id = :job_id;

-- name: set_executor_target
UPDATE jobs SET executor_target = :target WHERE job_id = :job_id;

-- name: report_resources
UPDATE jobs SET resources = :resources WHERE job_id = :job_id;

-- name: set_epoch_metrics
-- A NULL parameter keeps what is recorded (the CASTs give PostgreSQL the parameters' types).
UPDATE epochs
SET duration_ms = COALESCE(CAST(:duration_ms AS DOUBLE PRECISION), duration_ms),
    backlog = COALESCE(CAST(:backlog AS BIGINT), backlog),
    executors = COALESCE(CAST(:executors AS BIGINT), executors),
    cores = COALESCE(CAST(:cores AS BIGINT), cores),
    work_ms = COALESCE(CAST(:work_ms AS DOUBLE PRECISION), work_ms),
    progress = COALESCE(CAST(:progress AS TEXT), progress)
WHERE job_id = :job_id AND epoch = :epoch;

-- name: recent_epochs
-- Through epochs_by_commit: one job's epochs committed since :since, oldest first.
SELECT job_id, epoch, control_version, state, pinned_by, decided_by, rows_in, final,
       pinned_at, decided_at, committed_at, duration_ms, backlog, executors, cores, work_ms,
       progress
FROM epochs
WHERE job_id = :job_id AND committed_at >= :since AND state = 'COMMITTED'
ORDER BY committed_at, epoch;

-- name: next_rescale_id
-- The counter row is the sequence: locked until the inserting transaction ends.
UPDATE counters SET value = value + 1 WHERE name = 'rescales';

-- name: get_counter
SELECT value FROM counters WHERE name = :name;

-- name: insert_rescale
INSERT INTO rescales (rescale_id, job_id, at, kind, policy, mode, signals, from_executors,
                      to_executors, workers, reason, status, in_use_at, error, sender)
VALUES (:rescale_id, :job_id, :at, :kind, :policy, :mode, :signals, :from_executors,
        :to_executors, :workers, :reason, :status, NULL, NULL, :sender);

-- name: get_rescale
SELECT rescale_id, job_id, at, kind, policy, mode, signals, from_executors, to_executors,
       workers, reason, status, in_use_at, error, sender
FROM rescales WHERE rescale_id = :rescale_id;

-- name: lock_rescale
SELECT rescale_id, job_id, at, kind, policy, mode, signals, from_executors, to_executors,
       workers, reason, status, in_use_at, error, sender
FROM rescales WHERE rescale_id = :rescale_id;

-- name: update_rescale
-- :from_status was read (locked) and the move checked; the caller passes every column, the
-- unchanged ones as read.
UPDATE rescales SET status = :status, in_use_at = :in_use_at, workers = :workers, error = :error
WHERE rescale_id = :rescale_id AND status = :from_status;

-- name: list_rescales
-- Newest first; a NULL :since lists them all (the CASTs give PostgreSQL the types).
SELECT rescale_id, job_id, at, kind, policy, mode, signals, from_executors, to_executors,
       workers, reason, status, in_use_at, error, sender
FROM rescales
WHERE job_id = :job_id
  AND (CAST(:since AS DOUBLE PRECISION) IS NULL OR at >= CAST(:since AS DOUBLE PRECISION))
ORDER BY at DESC, rescale_id DESC LIMIT :limit;

-- name: insert_recovery_hold
INSERT INTO recovery_holds (job_id, attempt, host, pid, pid_started, expires_at)
VALUES (:job_id, :attempt, :host, :pid, :pid_started, :expires_at)
ON CONFLICT (job_id) DO NOTHING;

-- name: take_recovery_hold
-- Taken when it has lapsed, is already this holder's, or is held by exactly the holder the
-- caller saw gone (:gone_*; a compare and swap: a newer holder meanwhile is not taken over).
UPDATE recovery_holds
SET attempt = :attempt, host = :host, pid = :pid, pid_started = :pid_started,
    expires_at = :expires_at
WHERE job_id = :job_id
  AND (expires_at <= :now
       OR (attempt = :attempt AND host = :host AND pid = :pid AND pid_started = :pid_started)
       OR (attempt = :gone_attempt AND host = :gone_host AND pid = :gone_pid
           AND pid_started = :gone_pid_started));

-- name: get_recovery_hold
SELECT job_id, attempt, host, pid, pid_started, expires_at FROM recovery_holds
WHERE job_id = :job_id;

-- name: renew_recovery_hold
UPDATE recovery_holds SET expires_at = :expires_at
WHERE job_id = :job_id AND attempt = :attempt AND host = :host AND pid = :pid
  AND pid_started = :pid_started;

-- name: release_recovery_hold
DELETE FROM recovery_holds
WHERE job_id = :job_id AND attempt = :attempt AND host = :host AND pid = :pid
  AND pid_started = :pid_started;

-- Deleting ended records (stoker server --retention-jobs): the oldest ended lone jobs and
-- applications whose end is before :before; a lone job only once its sinks were resolved.
-- name: ended_before
SELECT job_id FROM jobs
WHERE state IN ('FINISHED', 'CANCELED', 'FAILED') AND updated_at < :before AND app_id IS NULL
  AND (kind = 'application' OR resolved_at IS NOT NULL)
ORDER BY updated_at, job_id
LIMIT :limit;

-- name: jobs_of_app
SELECT job_id, state, resolved_at FROM jobs WHERE app_id = :app_id;

-- name: delete_job_txns
DELETE FROM sink_txns WHERE job_id = :job_id;

-- name: delete_job_epochs
DELETE FROM epochs WHERE job_id = :job_id;

-- name: delete_job_control_events
DELETE FROM control_events WHERE job_id = :job_id;

-- name: delete_job_control_versions
DELETE FROM control_versions WHERE job_id = :job_id;

-- name: delete_job_rescales
DELETE FROM rescales WHERE job_id = :job_id;

-- name: delete_job_attempts
DELETE FROM attempts WHERE job_id = :job_id;

-- name: delete_job_hold
DELETE FROM recovery_holds WHERE job_id = :job_id;

-- name: delete_job_standby
DELETE FROM standbys WHERE job_id = :job_id;

-- name: delete_job_upgrades
DELETE FROM upgrades WHERE job_id = :job_id;

-- name: delete_job_row
DELETE FROM jobs WHERE job_id = :job_id;

-- Operations (migration 0015) ------------------------------------------------------------------
-- name: insert_operation
INSERT INTO operations (op_id, kind, target, request, idem_key, state, holder, created_at)
VALUES (:op_id, :kind, :target, :request, :idem_key, 'RUNNING', :holder, :now);

-- name: get_operation
SELECT op_id, kind, target, request, state, holder, result, error, error_type, created_at,
       ended_at
FROM operations WHERE op_id = :op_id;

-- name: find_operation
-- The newest operation of this request that runs, or ended at or after :since.
SELECT op_id, kind, target, request, state, holder, result, error, error_type, created_at,
       ended_at
FROM operations
WHERE kind = :kind AND target = :target AND request = :request
  AND (state = 'RUNNING' OR ended_at >= :since)
ORDER BY created_at DESC, op_id DESC LIMIT 1;

-- name: keyed_operation
SELECT op_id, kind, target, request, state, holder, result, error, error_type, created_at,
       ended_at
FROM operations WHERE idem_key = :idem_key;

-- name: running_operations
SELECT op_id, kind, target, request, state, holder, result, error, error_type, created_at,
       ended_at
FROM operations WHERE state = 'RUNNING' ORDER BY created_at, op_id;

-- name: end_operation
UPDATE operations SET state = :state, result = :result, error = :error,
                      error_type = :error_type, ended_at = :now
WHERE op_id = :op_id AND state = 'RUNNING';

-- name: delete_ended_operations
DELETE FROM operations WHERE ended_at < :before;

-- Standby drivers (migration 0016) -----------------------------------------------------------
-- name: insert_standby
INSERT INTO standbys (job_id, role, state, host, pid, pid_started, attempt, log_path, started_at,
                      ready_at, lease_expires_at, spec_key)
VALUES (:job_id, :role, 'WARMING', :host, :pid, :pid_started, NULL, :log_path, :now, NULL,
        :lease_expires_at, :spec_key)
ON CONFLICT (job_id, role) DO NOTHING;

-- name: get_standby
SELECT job_id, state, host, pid, pid_started, attempt, log_path, started_at, ready_at,
       lease_expires_at, role, spec_key
FROM standbys WHERE job_id = :job_id AND role = :role;

-- name: list_standbys
SELECT job_id, state, host, pid, pid_started, attempt, log_path, started_at, ready_at,
       lease_expires_at, role, spec_key
FROM standbys ORDER BY job_id, role;

-- name: renew_standby
-- The standby itself, while it warms and waits (a TAKEN one holds an attempt: not renewed).
UPDATE standbys SET lease_expires_at = :lease_expires_at,
                    state = CASE WHEN :ready = 1 THEN 'READY' ELSE state END,
                    ready_at = CASE WHEN :ready = 1 AND ready_at IS NULL THEN :now
                                    ELSE ready_at END
WHERE job_id = :job_id AND role = :role AND host = :host AND pid = :pid
  AND pid_started = :pid_started AND state IN ('WARMING', 'READY');

-- name: take_standby
UPDATE standbys SET state = 'TAKEN', attempt = :attempt
WHERE job_id = :job_id AND role = :role AND state = 'READY';

-- name: remove_standby
DELETE FROM standbys WHERE job_id = :job_id AND role = :role;

-- name: remove_standby_of
DELETE FROM standbys
WHERE job_id = :job_id AND role = :role AND host = :host AND pid = :pid
  AND pid_started = :pid_started;

-- Upgrades (migration 0017) -------------------------------------------------------------------
-- name: insert_upgrade
INSERT INTO upgrades (upgrade_id, job_id, state, old_spec, new_spec, watch_epochs,
                      watch_seconds, checks, detail, created_at)
VALUES (:upgrade_id, :job_id, 'PENDING', :old_spec, :new_spec, :watch_epochs, :watch_seconds,
        :checks, NULL, :now);

-- name: live_upgrade
SELECT upgrade_id, job_id, state, old_spec, new_spec, watch_epochs, watch_seconds, checks,
       detail, created_at, stop_attempt, stop_at, swap_attempt, swapped_at, ended_at
FROM upgrades WHERE job_id = :job_id AND state IN ('PENDING', 'SWAPPED');

-- name: live_upgrades
SELECT upgrade_id, job_id, state, old_spec, new_spec, watch_epochs, watch_seconds, checks,
       detail, created_at, stop_attempt, stop_at, swap_attempt, swapped_at, ended_at
FROM upgrades WHERE state IN ('PENDING', 'SWAPPED') ORDER BY created_at;

-- name: get_upgrade
SELECT upgrade_id, job_id, state, old_spec, new_spec, watch_epochs, watch_seconds, checks,
       detail, created_at, stop_attempt, stop_at, swap_attempt, swapped_at, ended_at
FROM upgrades WHERE upgrade_id = :upgrade_id;

-- name: list_upgrades
SELECT upgrade_id, job_id, state, old_spec, new_spec, watch_epochs, watch_seconds, checks,
       detail, created_at, stop_attempt, stop_at, swap_attempt, swapped_at, ended_at
FROM upgrades WHERE job_id = :job_id ORDER BY created_at DESC, upgrade_id DESC LIMIT :limit;

-- name: upgrade_stopping
UPDATE upgrades SET stop_attempt = :attempt, stop_at = :now
WHERE upgrade_id = :upgrade_id AND state = 'PENDING' AND stop_attempt IS NULL;

-- name: upgrade_swapped
UPDATE upgrades SET state = 'SWAPPED', swapped_at = :now
WHERE upgrade_id = :upgrade_id AND state = 'PENDING';

-- name: upgrade_swap_attempt
UPDATE upgrades SET swap_attempt = :attempt
WHERE upgrade_id = :upgrade_id AND state = 'SWAPPED' AND swap_attempt IS NULL;

-- name: upgrade_ended
UPDATE upgrades SET state = :state, detail = :detail, ended_at = :now
WHERE upgrade_id = :upgrade_id AND state = :from_state;

-- name: mark_judged
-- The leader (fenced in the same transaction) has judged the record's driver; not a change of
-- the record (updated_at kept: the janitor's and the lists' order do not move).
UPDATE jobs SET judged_by = :token
WHERE job_id = :job_id AND (judged_by IS NULL OR judged_by < :token);
