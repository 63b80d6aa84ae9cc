-- Ingest latency rows with any time at or after a moment (a clock diagnostic). Binds: the
-- moment (ms), three times.
SELECT count() FROM ingest_latency FINAL
WHERE t_detect_ms >= ? OR t_logs_ms >= ? OR t_stored_ms >= ?
