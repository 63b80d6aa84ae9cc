-- Push percentiles by channel and time bucket (live rows only). Binds: series start (ms),
-- bucket length (ms), from (ms), to (ms).
SELECT channel, toInt64(intDiv(t_push_ms - ?, ?)) AS bucket,
    count() AS n, quantilesExact(0.5, 0.99)(t_push_ms - t_detect_ms) AS q
FROM push_latency
WHERE backfilled = 0 AND channel IN ('ws', 'webhook') AND t_push_ms >= ? AND t_push_ms < ?
GROUP BY channel, bucket ORDER BY channel, bucket
