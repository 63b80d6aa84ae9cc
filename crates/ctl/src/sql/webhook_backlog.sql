-- The webhook backlog as of $1 = now (ms): pending, due and failed counts, the oldest pending
-- creation time, then the pending count in each age bucket (status.rs BUCKETS, in order).
SELECT count(*) FILTER (WHERE state = 'pending'),
    count(*) FILTER (WHERE state = 'pending' AND next_attempt_ms <= $1),
    count(*) FILTER (WHERE state = 'failed'),
    min(created_ms) FILTER (WHERE state = 'pending'),
    count(*) FILTER (WHERE state = 'pending' AND $1 - created_ms < 10000),
    count(*) FILTER (WHERE state = 'pending' AND $1 - created_ms >= 10000 AND $1 - created_ms < 60000),
    count(*) FILTER (WHERE state = 'pending' AND $1 - created_ms >= 60000 AND $1 - created_ms < 600000),
    count(*) FILTER (WHERE state = 'pending' AND $1 - created_ms >= 600000 AND $1 - created_ms < 3600000),
    count(*) FILTER (WHERE state = 'pending' AND $1 - created_ms >= 3600000)
FROM webhook_deliveries
