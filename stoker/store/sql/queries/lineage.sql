-- Savepoint lineage (sql_lineage.py, migration 0019): the restores of savepoints.

-- name: insert_savepoint_restore
INSERT INTO savepoint_restores (savepoint, uid, job_id, store, state_dir, from_job_id, from_uid,
                                epoch, path, fork, sinks, restored_at)
VALUES (:savepoint, :uid, :job_id, :store, :state_dir, :from_job_id, :from_uid, :epoch, :path,
        :fork, :sinks, :restored_at)
ON CONFLICT (savepoint, uid) DO NOTHING;

-- name: get_savepoint_restore
SELECT savepoint, uid, job_id, store, state_dir, from_job_id, from_uid, epoch, path, fork, sinks,
       restored_at
FROM savepoint_restores WHERE savepoint = :savepoint AND uid = :uid;

-- name: savepoint_restores_of_savepoint
SELECT savepoint, uid, job_id, store, state_dir, from_job_id, from_uid, epoch, path, fork, sinks,
       restored_at
FROM savepoint_restores WHERE savepoint = :savepoint ORDER BY restored_at, job_id;

-- name: savepoint_restores_of_uid
SELECT savepoint, uid, job_id, store, state_dir, from_job_id, from_uid, epoch, path, fork, sinks,
       restored_at
FROM savepoint_restores WHERE uid = :uid ORDER BY restored_at, job_id;

-- name: savepoint_restores_from_job
SELECT savepoint, uid, job_id, store, state_dir, from_job_id, from_uid, epoch, path, fork, sinks,
       restored_at
FROM savepoint_restores WHERE from_job_id = :from_job_id AND from_uid = :from_uid
ORDER BY restored_at, job_id;
