-- The completeness audit (pmw-live re-reads finalized blocks with eth_getLogs): a fill ingest
-- never stored and the audit did is flagged audit = 1 (and backfilled = 1; its t_detect_ms is
-- the audit's time). ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: the migration runner
-- treats "column already exists" on an ADD COLUMN as done, so a run interrupted half-way is
-- completed by the next one.
ALTER TABLE trades ADD COLUMN audit UInt8 DEFAULT 0;
ALTER TABLE trades_by_wallet ADD COLUMN audit UInt8 DEFAULT 0;
