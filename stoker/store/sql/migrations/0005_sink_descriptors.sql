-- The descriptors of a job's sinks (JSON list), recorded by each attempt when it opens them:
-- the janitor's cleanup rebuilds the sinks from them without running the application's code.
-- Trusted metadata (a DSN may carry a password): never part of an API answer.
ALTER TABLE jobs ADD COLUMN sinks TEXT;
