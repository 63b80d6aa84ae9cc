-- Push figures of one window by stage channel (live rows only): row count, detect-to-push
-- percentiles and the first push time. `final` events (channels ws_final and webhook_final)
-- make one stage, `final`; a webhook delivered by its first attempt counts in `webhook`
-- (eventually delivered, every attempt) and in `webhook_first` too (the inner alias is not
-- `channel`: ClickHouse aliases are query-wide, so the WHERE would read it). Binds: from (ms),
-- to (ms).
SELECT stage AS channel, count() AS n,
    quantilesExact(0.5, 0.95, 0.99)(d) AS q, min(t_push_ms) AS first_ms
FROM (SELECT arrayJoin(if(channel = 'webhook' AND attempt = 1, ['webhook', 'webhook_first'],
            [if(channel IN ('ws_final', 'webhook_final'), 'final', channel)])) AS stage,
        t_push_ms - t_detect_ms AS d, t_push_ms
    FROM push_latency
    WHERE backfilled = 0 AND channel IN ('ws', 'webhook', 'ws_final', 'webhook_final')
      AND t_push_ms >= ? AND t_push_ms < ?)
GROUP BY stage
