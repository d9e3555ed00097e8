-- Long calls of the REST API (a session cluster's start, a worker added or removed, a state
-- repartition) run as operations: the call answers 202 with the operation, which a client
-- polls (GET /v1/operations/{id}), as Flink's savepoint trigger ids. The row is what a
-- retry of the same call finds (by the client's Idempotency-Key; without one, the same
-- request while it runs) and what another manager can read after the one that ran it is gone
-- (holder).
CREATE TABLE operations (
    op_id       TEXT PRIMARY KEY,                -- op-<16 hex>
    kind        TEXT NOT NULL,                   -- start-cluster, add-worker, ...
    target      TEXT NOT NULL,                   -- the cluster or job it changes
    request     TEXT NOT NULL,                   -- the request's canonical JSON (request_key)
    idem_key    TEXT,                            -- the client's Idempotency-Key, if it sent one
    state       TEXT NOT NULL,                   -- RUNNING, SUCCEEDED, FAILED
    holder      TEXT NOT NULL,                   -- the manager that runs it
    result      TEXT,                            -- JSON: the answer the call would have given
    error       TEXT,                            -- FAILED: why
    error_type  TEXT,                            -- FAILED: the stoker error's class name
    created_at  DOUBLE PRECISION NOT NULL,
    ended_at    DOUBLE PRECISION
);

-- A retry finds the operation of its key, or of the same request; retention drops ended ones
-- by age. One operation per key (NULLs are distinct in both databases).
CREATE UNIQUE INDEX operations_by_key ON operations (idem_key);
CREATE INDEX operations_by_request ON operations (kind, target, request);
CREATE INDEX operations_by_end ON operations (ended_at);
