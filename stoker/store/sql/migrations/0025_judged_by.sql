-- kind: expand
-- Which leader has judged a record's driver (issue 39 item 7): the fencing token of the leader
-- that started the record's current attempt, or saw its driver alive (its process on this host,
-- or its lease renewed under its watch). After a manager restart or a failover the new leader's
-- token is higher, and until it has judged a job's driver the API shows the job RECONCILING
-- (Flink's state after a JobManager failover), not RUNNING on the word of a leader that is
-- gone. NULL: never judged (a record of older code, or one no manager runs: `stoker run`'s).
ALTER TABLE jobs ADD COLUMN judged_by BIGINT;
