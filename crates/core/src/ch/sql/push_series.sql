-- Push percentiles by stage channel and time bucket (live rows only; `final` events of both
-- channels are one stage, `final`; a webhook delivered by its first attempt counts in `webhook`
-- and in `webhook_first`; the inner alias is not `channel`: ClickHouse aliases are query-wide,
-- so the WHERE would read it). Binds: series start (ms), bucket length (ms), from (ms), to (ms).
SELECT stage AS channel, toInt64(intDiv(t_push_ms - ?, ?)) AS bucket,
    count() AS n, quantilesExact(0.5, 0.99)(d) AS q
FROM (SELECT arrayJoin(if(channel = 'webhook' AND attempt = 1, ['webhook', 'webhook_first'],
            [if(channel IN ('ws_final', 'webhook_final'), 'final', channel)])) AS stage,
        t_push_ms - t_detect_ms AS d, t_push_ms
    FROM push_latency
    WHERE backfilled = 0 AND channel IN ('ws', 'webhook', 'ws_final', 'webhook_final')
      AND t_push_ms >= ? AND t_push_ms < ?)
GROUP BY stage, bucket ORDER BY stage, bucket
