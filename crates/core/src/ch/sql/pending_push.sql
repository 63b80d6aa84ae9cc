-- Seen-pending → pushed of one window by channel (`ws_pending`: a `pending` frame written to a
-- session; `webhook_pending`: a `pending` webhook delivered, whichever attempt): row count and
-- percentiles of t_push_ms − t_detect_ms, where t_detect_ms is the fill's first sighting in a
-- pool. Live rows only (a session connecting is sent the open fills without a row). Binds: from
-- (ms), to (ms).
SELECT channel, count() AS n, quantilesExact(0.5, 0.95, 0.99)(t_push_ms - t_detect_ms) AS q
FROM push_latency
WHERE backfilled = 0 AND channel IN ('ws_pending', 'webhook_pending')
  AND t_push_ms >= ? AND t_push_ms < ?
GROUP BY channel
