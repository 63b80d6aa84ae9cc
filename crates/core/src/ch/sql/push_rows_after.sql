-- Push latency rows with any time at or after a moment (a clock diagnostic). Binds: the moment
-- (ms), twice.
SELECT count() FROM push_latency WHERE t_push_ms >= ? OR t_detect_ms >= ?
