-- A job is settled when the janitor resolved its sinks with every process of its attempts
-- provably gone (or none ever ran): nothing can prepare a part for it any more, so no later
-- janitor (this leader after a restart, or the next leader) resolves it again. Entering a
-- terminal state again (a restarted job that ends) makes it unsettled: a new end owes a new
-- resolution. 0 or 1.
ALTER TABLE jobs ADD COLUMN settled BIGINT NOT NULL DEFAULT 0;
