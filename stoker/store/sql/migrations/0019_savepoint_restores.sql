-- Savepoint lineage (issue 40, item 1): which job a savepoint was restored into, under which
-- uid, and when. A restore records itself in the savepoint's job's store (where every other
-- restore of that savepoint looks) and in its own. One uid goes on from a savepoint once: a
-- second restore under the savepoint's uid finds the first one's row (the primary key) and is
-- refused; a fork takes a uid of its own. Every start of a restored job reads these rows (the
-- other jobs of its uid), and so does every start of a job whose savepoint went elsewhere.
CREATE TABLE savepoint_restores (
    savepoint      TEXT NOT NULL,              -- the savepoint's key: job, uid, control id
    uid            TEXT NOT NULL,              -- the restored job's uid
    job_id         TEXT NOT NULL,              -- the restored job
    store          TEXT NOT NULL,              -- its store's URL, password hidden
    state_dir      TEXT NOT NULL,              -- its state folder
    from_job_id    TEXT NOT NULL,              -- the savepoint's job
    from_uid       TEXT NOT NULL,              -- and its uid
    epoch          BIGINT,                     -- the savepoint's epoch (NULL: before the first)
    path           TEXT NOT NULL,              -- the savepoint's folder as restored from
    fork           BIGINT NOT NULL DEFAULT 0,  -- 1: a fork (a new uid, outputs of its own)
    sinks          TEXT NOT NULL,              -- JSON: [{"name", "target"}] it writes
    restored_at    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (savepoint, uid)
);
CREATE INDEX savepoint_restores_by_uid ON savepoint_restores (uid);
CREATE INDEX savepoint_restores_from_job ON savepoint_restores (from_job_id, from_uid);
