-- Ingest figures of one window (live rows only): row count, detect-to-logs and detect-to-stored
-- percentiles, the head lead, and the first detect time. Binds: from (ms), to (ms).
SELECT count() AS n,
    quantilesExact(0.5, 0.95, 0.99)(t_logs_ms - t_detect_ms) AS logs_q,
    quantilesExact(0.5, 0.95, 0.99)(t_stored_ms - t_detect_ms) AS stored_q,
    quantileExact(0.5)(head_lead_ms) AS lead_p50, min(head_lead_ms) AS lead_min,
    max(head_lead_ms) AS lead_max, min(t_detect_ms) AS first_ms
FROM ingest_latency FINAL
WHERE backfilled = 0 AND t_detect_ms >= ? AND t_detect_ms < ?
