-- Hardening: a job's identity across state folders, and the resolution of its sinks at its end.

-- Random per job record. A job id re-created in a fresh store (a new state folder) gets a new
-- uid, so an output folder written by the earlier incarnation is recognised as someone else's.
ALTER TABLE jobs ADD COLUMN uid TEXT;
-- When the sinks of an ended job were last resolved (decided parts committed, the rest
-- aborted); NULL while that is still owed.
ALTER TABLE jobs ADD COLUMN resolved_at DOUBLE PRECISION;

-- Jobs made before this migration get a uid of their own too (derived, not random: both
-- dialects can compute it), so their output folders are recognised as theirs on the next run.
UPDATE jobs SET uid = 'legacy:' || job_id || ':' || CAST(created_at AS TEXT) WHERE uid IS NULL;
