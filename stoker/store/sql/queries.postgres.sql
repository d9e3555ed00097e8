-- PostgreSQL overrides of queries.sql.

-- name: lock_job
-- Row lock: two managers starting an attempt for one job serialise here.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at
FROM jobs WHERE job_id = :job_id FOR UPDATE;
