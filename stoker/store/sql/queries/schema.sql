-- Which stoker may use the store (issue 39 item 5, store/_schema.py).

-- name: newer_migrations
-- The migrations the reading stoker does not know: their kind says whether it may go on.
SELECT version, kind, stoker_version, applied_at FROM schema_migrations
WHERE version > :known ORDER BY version;

-- name: record_migration
INSERT INTO schema_migrations (version, applied_at) VALUES (:version, :now);

-- name: describe_migration
-- Once the columns exist (migration 0020): what the migration is and which stoker applied it.
UPDATE schema_migrations SET kind = :kind, stoker_version = :stoker_version
WHERE version = :version;

-- name: leader_for_schema
SELECT holder, expires_at, renewals, ttl FROM leader_lease WHERE name = 'leader';

-- name: managers_for_schema
SELECT holder, address, stoker_version, schema_version FROM managers
WHERE seen_at >= :since ORDER BY started_at, holder;
