-- Published availability (issue 28 item 4). Statements are separated by ';' at the end of a line;
-- no question marks anywhere in this file (the client treats them as bind placeholders).

-- One row per second while pmw-stats runs (its sampler, holding the stats lock): how far push
-- and ingest trail, read from Postgres. A second without a row was not sampled: the dashboard never counts it as available.
-- push_lag_ms: how long the oldest trade at or below the ingest watermark and past the push
-- cursor has been readable (0: push owes nothing; -1: not measurable). ingest_lag_blocks: the newest
-- head pmw-live received minus the watermark (-1: no fresh pmw-live heartbeat). *_ok: within
-- the published bound; *_down_since_ms: the first sample of the run of failing samples this one
-- belongs to (0 when ok). Dropped by day partition with the latency tables (at least 31 days).
CREATE TABLE IF NOT EXISTS availability_samples (
    t_ms                 Int64,
    push_lag_ms          Int64,
    push_ok              UInt8,
    push_down_since_ms   Int64,
    ingest_lag_blocks    Int64,
    ingest_ok            UInt8,
    ingest_down_since_ms Int64,
    watermark            UInt64,
    head                 UInt64,
    push_block           UInt64
) ENGINE = MergeTree()
PARTITION BY intDiv(t_ms, 86400000)
ORDER BY t_ms;

-- The webhook attempt that delivered a push_latency row (1: the first); 0 for WebSocket frames and
-- rows written before this migration. ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: the
-- migration runner treats "column already exists" on an ADD COLUMN as done.
ALTER TABLE push_latency ADD COLUMN attempt UInt32 DEFAULT 0;
