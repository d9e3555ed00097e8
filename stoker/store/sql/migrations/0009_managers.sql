-- The job manager processes (leader candidates) that share this store, so that the web UI and
-- GET /v1/managers can show the standbys beside the leader. A heartbeat, not a lease: each
-- supervisor refreshes its row as it runs its election, removes it when it stops cleanly,
-- and readers count a row only while it is fresh. Nothing decides on it; the leader lease
-- (leader_lease) stays the one authority on who leads.
CREATE TABLE managers (
    holder      TEXT PRIMARY KEY,                -- the id the manager takes the lease under
    address     TEXT NOT NULL,                   -- where it serves (its URL)
    started_at  DOUBLE PRECISION NOT NULL,       -- its first heartbeat
    seen_at     DOUBLE PRECISION NOT NULL        -- its last heartbeat
);

-- Readers list the rows seen since a moment; writers drop those not seen for long.
CREATE INDEX managers_by_seen ON managers (seen_at);
