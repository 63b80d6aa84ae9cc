-- Push figures of one window by channel (live rows only): row count, detect-to-push
-- percentiles and the first push time. Binds: from (ms), to (ms).
SELECT channel, count() AS n,
    quantilesExact(0.5, 0.95, 0.99)(t_push_ms - t_detect_ms) AS q, min(t_push_ms) AS first_ms
FROM push_latency
WHERE backfilled = 0 AND channel IN ('ws', 'webhook') AND t_push_ms >= ? AND t_push_ms < ?
GROUP BY channel
