-- PostgreSQL overrides of queries.sql.

-- name: lock_job
-- Row lock: two managers starting an attempt for one job serialise here.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs WHERE job_id = :job_id FOR UPDATE;

-- name: decide_epoch
-- As in queries.sql, plus FOR SHARE on the job row. Without it the fence reads the job from the
-- statement's snapshot: a decide that read it just before a takeover committed could still
-- land afterwards (say, after waiting on the epoch row), when the new attempt has already seen
-- the epoch PINNED. The lock makes the decide wait for a takeover in flight, and READ
-- COMMITTED then re-checks the job row as committed, so the old attempt finds itself fenced.
-- The application's row is not locked: every job of an application would share-lock that one
-- row on every epoch. So a decide whose snapshot predates a new driver attempt may still land
-- just after it; that is safe, because the new driver re-adopts the job through start_attempt,
-- which takes the job row (FOR UPDATE) and therefore sees such a decide as DECIDED.
UPDATE epochs SET state = 'DECIDED', decided_by = :attempt, rows_in = :rows_in, final = :final,
                  decided_at = :now
WHERE job_id = :job_id AND epoch = :epoch AND state = :from_state
  AND EXISTS (
      SELECT 1 FROM jobs j JOIN attempts a ON a.job_id = j.job_id AND a.attempt = j.current_attempt
      WHERE j.job_id = :job_id AND j.current_attempt = :attempt
        AND a.state = 'RUNNING'
        AND (a.app_attempt IS NULL
             OR EXISTS (SELECT 1 FROM jobs p
                        WHERE p.job_id = j.app_id AND p.current_attempt = a.app_attempt))
      FOR SHARE OF j);

-- name: lock_attempt
-- Row lock: the attempt's state is read, checked against ATTEMPT_TRANSITIONS, then changed.
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path, app_attempt, renewals, lease_ttl, cause
FROM attempts WHERE job_id = :job_id AND attempt = :attempt FOR UPDATE;

-- name: lock_control_event
-- Row lock: the event's status is read, checked against CONTROL_TRANSITIONS, then changed.
SELECT job_id, control_id, version, kind, body, status, applied_epoch, reason, result, request_id,
       sender, origin, created_at, applied_at, ended_at
FROM control_events WHERE job_id = :job_id AND control_id = :control_id FOR UPDATE;

-- name: share_job
-- Shared row lock: the application's current attempt cannot change (a new driver attempt takes
-- FOR UPDATE) while an attempt of one of its jobs starts under it; its jobs may start together.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs WHERE job_id = :job_id FOR SHARE;

-- name: lock_cluster
-- Row lock: the cluster's state is read, checked against CLUSTER_TRANSITIONS, then changed.
SELECT name, kind, owner_app, spec, state, master_url, web_url, processes, error, created_at,
       updated_at, host
FROM clusters WHERE name = :name FOR UPDATE;

-- name: lock_cluster_budget
-- Every check of a host's cluster budget and the record it admits (a cluster, a worker), one
-- after the other across managers: the check reads the clusters, and without it two managers
-- would both read room for one more and both record theirs. Held to the end of the
-- transaction; a key of its own (74117 is the migrations'). Taken before any cluster's row
-- lock, and no one waits for it holding one: no deadlock.
SELECT pg_advisory_xact_lock(74124);

-- name: lock_rescale
-- Row lock: the rescale's status is read, checked against RESCALE_TRANSITIONS, then changed.
SELECT rescale_id, job_id, at, kind, policy, mode, signals, from_executors, to_executors,
       workers, reason, status, in_use_at, error, sender
FROM rescales WHERE rescale_id = :rescale_id FOR UPDATE;

-- name: lock_leader
-- Row lock: whether the lease may be taken is decided on the row as locked, then it is taken.
SELECT name, holder, address, token, expires_at, renewals, ttl FROM leader_lease
WHERE name = 'leader' FOR UPDATE;

-- name: check_leader
-- The fence of a write made as the leader, with a share lock on the lease row: a takeover
-- (an UPDATE of that row) waits for the write's transaction, so no write of an old leader
-- lands after a new one took the lease.
SELECT 1 FROM leader_lease
WHERE name = 'leader' AND holder = :holder AND token = :token AND renewals >= 0
FOR SHARE;
