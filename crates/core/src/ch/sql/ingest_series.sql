-- Ingest percentiles by time bucket (live rows only). Binds: series start (ms), bucket length
-- (ms), from (ms), to (ms).
SELECT toInt64(intDiv(t_detect_ms - ?, ?)) AS bucket, count() AS n,
    quantilesExact(0.5, 0.99)(t_logs_ms - t_detect_ms) AS logs_q,
    quantilesExact(0.5, 0.99)(t_stored_ms - t_detect_ms) AS stored_q
FROM ingest_latency FINAL
WHERE backfilled = 0 AND t_detect_ms >= ? AND t_detect_ms < ?
GROUP BY bucket ORDER BY bucket
