-- SQLite overrides of queries.sql.

-- name: unsettled_page
-- As in queries.sql (the janitor's walk), through the index of the unsettled jobs named: with
-- no statistics (no ANALYZE) SQLite's planner takes jobs_by_created for kind = 'job', which
-- reads every job the store keeps and sorts them.
SELECT job_id, name, state, spec, current_attempt, control_version, last_error, created_at, updated_at,
       cancel_requested_at, failures, next_attempt_at, uid, resolved_at, kind, app_id,
       scaling, executor_target, resources, judged_by
FROM jobs INDEXED BY jobs_unsettled
WHERE settled = 0 AND kind = 'job' AND state IN ('FINISHED', 'CANCELED', 'FAILED')
  AND (CAST(:after_at AS DOUBLE PRECISION) IS NULL
       OR updated_at > CAST(:after_at AS DOUBLE PRECISION)
       OR (updated_at = CAST(:after_at AS DOUBLE PRECISION) AND job_id > CAST(:after_id AS TEXT)))
ORDER BY updated_at, job_id
LIMIT :limit;

-- name: unsettled_attempts
-- As in queries.sql, through the same index as unsettled_page.
SELECT job_id, attempt, state, host, pid, pid_started, lease_expires_at, started_at, ended_at, error,
       log_path, app_attempt, renewals, lease_ttl, cause
FROM attempts
WHERE job_id IN (
    SELECT job_id FROM jobs INDEXED BY jobs_unsettled
    WHERE settled = 0 AND kind = 'job' AND state IN ('FINISHED', 'CANCELED', 'FAILED')
      AND (CAST(:after_at AS DOUBLE PRECISION) IS NULL
           OR updated_at > CAST(:after_at AS DOUBLE PRECISION)
           OR (updated_at = CAST(:after_at AS DOUBLE PRECISION)
               AND job_id > CAST(:after_id AS TEXT)))
    ORDER BY updated_at, job_id
    LIMIT :limit)
ORDER BY job_id, attempt;
