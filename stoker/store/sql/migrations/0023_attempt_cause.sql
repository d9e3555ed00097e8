-- kind: expand
-- Whose failure ended an attempt FAILED (stoker.restart.FailureCause: 'job', 'never-launched',
-- 'handover-lost', 'upgrade-rolled-back'), written by the one who ends it: a restart budget
-- counts a failure by its cause, never by its message's text. NULL: an attempt that did not
-- fail, or a row of older code (whose cause is read from the texts it wrote, as before).
ALTER TABLE attempts ADD COLUMN cause TEXT;
