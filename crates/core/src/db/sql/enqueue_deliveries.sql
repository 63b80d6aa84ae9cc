-- pmw:enqueue_deliveries: queue webhook deliveries, due now ($3). Push's rounds pass their slot
-- ($1) and epoch ($2): the insert lands only while that epoch is current (row FOR SHARE, same
-- statement). The API's replay passes NULL for both (it is not a leader) and $11 = true, which
-- puts deliveries already delivered or failed back to pending. Only endpoints that still exist
-- and are enabled get rows; they are locked FOR KEY SHARE, so a concurrent delete is either
-- already visible (the row is skipped) or waits for this transaction (the foreign key holds).
-- Returns (fence holds, inserted or requeued, deliverable).
WITH fence AS MATERIALIZED (
    SELECT $2::bigint IS NULL OR EXISTS (
        SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE
    ) AS ok
), x AS (
    SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::int[], $9::jsonb[], $10::bigint[])
        AS x(id, endpoint_id, kind, block_number, log_index, payload, t_detect_ms)
), live AS MATERIALIZED (
    SELECT x.* FROM x JOIN webhook_endpoints e ON e.id = x.endpoint_id AND e.enabled
    WHERE (SELECT ok FROM fence)
    FOR KEY SHARE OF e
), ins AS (
    INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload,
        state, attempts, next_attempt_ms, t_detect_ms, created_ms)
    SELECT id, endpoint_id, kind, block_number, log_index, payload, 'pending', 0, $3, t_detect_ms, $3
    FROM live
    ON CONFLICT (id) DO UPDATE SET state = 'pending', attempts = 0, next_attempt_ms = $3,
        claimed_epoch = NULL, claimed_ms = NULL, last_status = NULL, last_error = NULL, done_ms = NULL
    WHERE $11 AND webhook_deliveries.state <> 'pending'
    RETURNING 1
)
SELECT (SELECT ok FROM fence), (SELECT count(*) FROM ins), (SELECT count(*) FROM live)
