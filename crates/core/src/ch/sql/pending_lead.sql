-- The lead over the header of one window: per pending fill that was pushed (its first
-- `ws_pending`/`webhook_pending` row) and whose confirming trade was delivered (a `ws`/`webhook`
-- row naming it), both inside the window: the trade's t_detect_ms (its block header received)
-- minus the first push of the pending (positive: the pending was out before the header).
-- Percentiles over fills (p50, p90). Aliases differ from the column names (ClickHouse aliases
-- are query-wide). Binds: from (ms), to (ms).
SELECT count() AS n, quantilesExact(0.5, 0.9)(header_ms - pushed_ms) AS q
FROM (SELECT pending_id,
        minIf(t_detect_ms, channel IN ('ws', 'webhook')) AS header_ms,
        minIf(t_push_ms, channel IN ('ws_pending', 'webhook_pending')) AS pushed_ms,
        countIf(channel IN ('ws', 'webhook')) AS trade_rows,
        countIf(channel IN ('ws_pending', 'webhook_pending')) AS pending_rows
    FROM push_latency
    WHERE backfilled = 0 AND pending_id > 0
      AND channel IN ('ws', 'webhook', 'ws_pending', 'webhook_pending')
      AND t_push_ms >= ? AND t_push_ms < ?
    GROUP BY pending_id)
WHERE trade_rows > 0 AND pending_rows > 0
