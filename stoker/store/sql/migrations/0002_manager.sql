-- The job manager: cancel requests, restart bookkeeping, per-attempt logs, the leader lease.

ALTER TABLE jobs ADD COLUMN cancel_requested_at DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN failures BIGINT NOT NULL DEFAULT 0;       -- failed attempts in a row
ALTER TABLE jobs ADD COLUMN next_attempt_at DOUBLE PRECISION;         -- restart delay until
ALTER TABLE attempts ADD COLUMN log_path TEXT;

CREATE TABLE leader_lease (
    name        TEXT PRIMARY KEY,                -- one row: 'leader'
    holder      TEXT NOT NULL,                   -- manager instance id
    address     TEXT NOT NULL,                   -- where that manager serves
    token       BIGINT NOT NULL,                 -- fencing token: grows with every new holder
    expires_at  DOUBLE PRECISION NOT NULL
);
