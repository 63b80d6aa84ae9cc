-- pmw:enqueue_pending: the pending lane's webhook deliveries (`pending`, `void`; #43, migration
-- 0024), due now ($3), landing only while the leader's epoch ($2) of slot $1 is current (its row
-- FOR SHARE, same statement) and only for endpoints still enabled (locked FOR KEY SHARE, so a
-- concurrent delete either is visible or waits). A `void` is queued only behind its `pending`'s
-- delivery, when that may have reached the endpoint: still due, delivered, or ever sent (claimed
-- or attempted: a pending cancelled while its request was in flight, by a lane round that ran
-- between the fill's end and the read of its `void`, did reach it). An endpoint that never got
-- the pending gets no void. Ids already queued are left alone. They take no ledger position
-- (block 0, log index 0).
-- Returns (fence holds, rows inserted).
WITH fence AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE) AS ok
), x AS (
    SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[], $8::bigint[])
        AS x(id, endpoint_id, kind, payload, t_detect_ms)
), eps AS MATERIALIZED (
    SELECT e.id FROM webhook_endpoints e
    WHERE e.id = ANY ($5::bigint[]) AND e.enabled AND (SELECT ok FROM fence)
    FOR KEY SHARE OF e
), ins AS (
    INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload,
        state, attempts, next_attempt_ms, t_detect_ms, created_ms)
    SELECT x.id, x.endpoint_id, x.kind, 0, 0, x.payload, 'pending', 0, $3, x.t_detect_ms, $3
    FROM x
    WHERE x.endpoint_id IN (SELECT id FROM eps)
      AND (x.kind = 'pending' OR EXISTS (
          SELECT 1 FROM webhook_deliveries p
          WHERE p.id = regexp_replace(x.id, '_void$', '_pending')
            AND (p.state IN ('pending', 'delivered') OR p.claimed_epoch IS NOT NULL
                 OR p.attempts > 0)))
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT ok FROM fence), (SELECT count(*) FROM ins)
