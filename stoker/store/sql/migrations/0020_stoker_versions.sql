-- kind: expand
-- Upgrading stoker itself (issue 39 item 5). Drivers outlive their manager, and managers are
-- upgraded one at a time, so two versions of stoker meet on one store. Every migration says
-- what it does to the code before it (its first line, '-- kind: expand' or '-- kind:
-- contract'), and the store keeps that beside the version and the stoker that applied it:
-- an older stoker reads the rows it does not know and refuses the store only when one of them
-- is a contract migration (a column dropped or renamed, a meaning changed), never for an
-- expand one (a new table, a new nullable column), which it can keep using. Each manager's
-- heartbeat row says which stoker and schema it runs, so a new manager can see an older
-- leader before it applies a contract migration under it. Only new nullable columns: this
-- migration is expand, and the stoker before it keeps working on a store it has migrated.
ALTER TABLE schema_migrations ADD COLUMN kind TEXT;             -- 'expand' | 'contract'
ALTER TABLE schema_migrations ADD COLUMN stoker_version TEXT;   -- the stoker that applied it
ALTER TABLE managers ADD COLUMN stoker_version TEXT;            -- NULL: a stoker before this
ALTER TABLE managers ADD COLUMN schema_version BIGINT;          -- the newest migration it knows
