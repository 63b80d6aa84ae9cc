SELECT count(), quantileExact(0.5)(t_push_ms - t_detect_ms) FROM push_latency
WHERE channel = ? AND backfilled = 0 AND t_push_ms >= ? AND t_push_ms < ?
