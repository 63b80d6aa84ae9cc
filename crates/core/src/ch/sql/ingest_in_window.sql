-- Ingest latency rows detected inside a window, de-duplicated, in block order. Binds: from
-- (ms), to (ms).
SELECT block_number, block_hash, t_detect_ms, t_logs_ms, t_stored_ms, head_lead_ms, trade_count,
    backfilled
FROM ingest_latency FINAL WHERE t_detect_ms >= ? AND t_detect_ms < ? ORDER BY block_number
