-- Enqueue a round's webhook deliveries, fenced by the slot's epoch (row FOR SHARE, same
-- statement). Only endpoints that still exist and are enabled get rows; they are locked FOR KEY
-- SHARE so a concurrent delete is either already visible (the row is skipped) or waits for this
-- transaction (the foreign key holds). Returns (fence rows, inserted, deliverable).
WITH fence AS MATERIALIZED (
    SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE
), x AS (
    SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::int[], $9::jsonb[], $10::bigint[])
        AS x(id, endpoint_id, kind, block_number, log_index, payload, t_detect_ms)
), live AS MATERIALIZED (
    SELECT x.* FROM x JOIN webhook_endpoints e ON e.id = x.endpoint_id AND e.enabled
    WHERE EXISTS (SELECT 1 FROM fence)
    FOR KEY SHARE OF e
), ins AS (
    INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload,
        state, attempts, next_attempt_ms, t_detect_ms, created_ms)
    SELECT id, endpoint_id, kind, block_number, log_index, payload, 'pending', 0, $3, t_detect_ms, $3
    FROM live
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM ins), (SELECT count(*) FROM live)
