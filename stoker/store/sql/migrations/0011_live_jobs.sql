-- The leader's tick reads the live jobs only (a store keeps every ended job until retention
-- deletes it: at 10,000 jobs, reading them all each 0.2 s took 325 ms); an index on state
-- lets it find the live ones without a scan.
CREATE INDEX jobs_by_state ON jobs (state);
