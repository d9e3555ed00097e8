-- kind: expand
-- The cluster budget is a host's (issue 39 item 7): managers on several hosts may share one
-- PostgreSQL store, and each host's budget counts only the clusters started there. Each
-- cluster records the host whose manager created it (stoker.procs.host_id(), as its processes
-- name it), written in the one transaction that checks the budget and records the cluster.
-- NULL: a row of code before this migration, whose host is unknown: every host's budget
-- counts it (the safe side). A new nullable column only: the code before it keeps working.
ALTER TABLE clusters ADD COLUMN host TEXT;
