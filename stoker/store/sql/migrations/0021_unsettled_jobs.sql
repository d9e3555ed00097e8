-- kind: expand
-- The janitor reads the ended jobs it may owe a cleanup a slice at a time (issue 39 item 3):
-- through this index, only the rows not settled yet, in the order it walks them, never every
-- ended job the store keeps. A job settles once its sinks are resolved for good, or once the
-- janitor has judged it is not its to clean (a `stoker run` job, resolved by its runner); an
-- ended application is never the janitor's and is left out. An index only: the code before
-- it keeps working on a store that has it.
CREATE INDEX jobs_unsettled ON jobs (updated_at, job_id)
WHERE settled = 0 AND kind = 'job' AND state IN ('FINISHED', 'CANCELED', 'FAILED');
