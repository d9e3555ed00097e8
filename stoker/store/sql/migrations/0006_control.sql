-- The control plane (issue 9): control state beyond the user config, and the control events.
-- Portable as the earlier ones: JSON documents are TEXT, times DOUBLE PRECISION, and both
-- dialects let a UNIQUE constraint hold many NULLs (events sent without a request_id).

-- Everything control changes besides the user config (stoker/control/events.py): the declared
-- base config, control's overrides, rate limit, log levels, trigger, paused, the pipeline's
-- description. Versions made before this migration had none.
ALTER TABLE control_versions ADD COLUMN state TEXT NOT NULL DEFAULT '{}';

-- One row per control event, made in the transaction that makes its control version.
-- PENDING -> APPLIED (at applied_epoch, by the pin of that epoch) -> COMMITTED (by the commit
-- of that epoch), or REJECTED with a reason (CONTROL_TRANSITIONS in types.py).
CREATE TABLE control_events (
    job_id         TEXT NOT NULL REFERENCES jobs (job_id),
    control_id     TEXT NOT NULL,
    version        BIGINT NOT NULL,               -- the control version this event made
    kind           TEXT NOT NULL,
    body           TEXT NOT NULL,                 -- JSON: the validated event
    status         TEXT NOT NULL,
    applied_epoch  BIGINT,
    reason         TEXT,                          -- why it was REJECTED
    result         TEXT,                          -- JSON: what it produced (a savepoint's path)
    request_id     TEXT,                          -- the client's retry key
    sender         TEXT NOT NULL,
    origin         TEXT,
    created_at     DOUBLE PRECISION NOT NULL,
    applied_at     DOUBLE PRECISION,
    ended_at       DOUBLE PRECISION,
    PRIMARY KEY (job_id, control_id),
    UNIQUE (job_id, version),
    UNIQUE (job_id, request_id)
);

-- Every pin looks for PENDING events and every commit for APPLIED ones: both are few.
CREATE INDEX control_events_by_status ON control_events (job_id, status);
-- What an epoch applied (a replay of it reads them again).
CREATE INDEX control_events_by_epoch ON control_events (job_id, applied_epoch);
