-- Retention: totals for metrics that survive pruning and cost one indexed read per scrape.

-- One row per total. Each is bumped in the same transaction as the change it counts (an
-- attempt's start, an epoch's commit), so pruning old rows never lowers it.
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,                      -- 'attempts', 'epochs_committed'
    value  BIGINT NOT NULL
);

-- Seeded from what the store holds when the migration runs.
INSERT INTO counters (name, value) SELECT 'attempts', COUNT(*) FROM attempts;
INSERT INTO counters (name, value) SELECT 'epochs_committed', COUNT(*) FROM epochs
WHERE state = 'COMMITTED';
