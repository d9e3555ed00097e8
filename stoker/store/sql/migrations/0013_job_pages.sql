-- Pages of the jobs list (issue 21 item 9): `GET /v1/jobs?limit=N&after=CURSOR` reads the next N
-- records in (created_at, job_id) order from the cursor on, through this index, instead of
-- every record the store keeps.
CREATE INDEX jobs_by_created ON jobs (kind, created_at, job_id);
