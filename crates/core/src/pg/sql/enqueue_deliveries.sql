-- pmw:enqueue_deliveries: queue webhook deliveries, due now ($3). Push's rounds pass their slot
-- ($1) and epoch ($2): the insert lands only while that epoch is current (row FOR SHARE, same
-- statement). The API's replay passes NULL for both (it is not a leader) and $11 = true, which
-- puts deliveries already delivered or failed back to pending, with the body it rendered (a
-- delivered row keeps none: migration 0028). Only endpoints that still exist
-- and are enabled get rows; they are locked FOR KEY SHARE, so a concurrent delete is either
-- already visible (the row is skipped) or waits for this transaction (and its trigger then
-- deletes these rows: migration 0027).
-- A retract is queued only behind a trade delivery the endpoint got or may still get in flight:
-- a trade delivery still waiting (pending, not claimed) is cancelled instead (state failed,
-- last_error "cancelled: …") and neither is sent; a trade delivery that failed or never existed
-- gets no retract. The dispatcher sends a retract only after its trade's delivery is done.
-- A `final` is always queued (the finality lane runs behind the webhook lane, so the trade's
-- delivery, if the endpoint gets trades, is already queued); the dispatcher sends it only after
-- its trade's delivery is done. For a `final`-only endpoint a retract follows its `final`.
-- With $12 (a push leader's webhook lane), new trade deliveries are inserted already claimed by
-- the epoch, for the leader's dispatcher to attempt without a claim statement (a successor's
-- epoch claims them again, as any other claim). The statement's cost is in its rows: each
-- endpoint is locked and described once (not once per delivery), and of the claimed trade
-- deliveries only the exceptions come back (a batch's trades minus these are what was claimed).
-- A body is passed once ($9) however many endpoints get it, each delivery naming its own ($13,
-- 1-based): a round's bodies repeat per endpoint, and carrying each copy through the statement's
-- materialized rows cost more than inserting it.
-- Returns (fence holds, inserted or requeued, deliverable, cancelled trade ids, their endpoints,
-- blocks and log indexes, the deliverable trade ids not inserted claimed, then the deliverable
-- endpoints with their account, url, secret, previous secret and its expiry, and the start of
-- their run of failures).
WITH fence AS MATERIALIZED (
    SELECT $2::bigint IS NULL OR EXISTS (
        SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE
    ) AS ok
), x AS (
    SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::int[], $13::int[], $10::bigint[])
        AS x(id, endpoint_id, kind, block_number, log_index, body, t_detect_ms)
), bodies AS (
    SELECT * FROM unnest($9::text[]) WITH ORDINALITY AS b(payload, n)
), eps AS MATERIALIZED (
    SELECT e.id, e.account_id, e.url, e.secret, e.previous_secret, e.previous_expires_ms
    FROM webhook_endpoints e
    WHERE e.id = ANY ($5::bigint[]) AND e.enabled AND (SELECT ok FROM fence)
    FOR KEY SHARE OF e
), live AS MATERIALIZED (
    SELECT x.* FROM x WHERE x.endpoint_id IN (SELECT id FROM eps)
), cancel AS (
    -- by primary key: the trade ids of this batch's retracts (none in most rounds)
    UPDATE webhook_deliveries t
    SET state = 'failed', last_error = 'cancelled: retracted before delivery', done_ms = $3
    WHERE t.id = ANY (ARRAY(SELECT regexp_replace(id, '_retract$', '_trade') FROM live
                            WHERE kind = 'retract'))
      AND t.state = 'pending' AND t.claimed_epoch IS NULL
    RETURNING t.id, t.endpoint_id, t.block_number, t.log_index,
              regexp_replace(t.id, '_trade$', '_retract') AS retract_id
), ins AS (
    INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload,
        state, attempts, next_attempt_ms, t_detect_ms, created_ms, claimed_epoch, claimed_ms)
    SELECT id, endpoint_id, kind, block_number, log_index, b.payload, 'pending', 0, $3, t_detect_ms, $3,
        CASE WHEN $12 AND kind = 'trade' THEN $2::bigint END, CASE WHEN $12 AND kind = 'trade' THEN $3::bigint END
    FROM live JOIN bodies b ON b.n = live.body
    WHERE live.kind IN ('trade', 'final')
       OR (NOT EXISTS (SELECT 1 FROM cancel c WHERE c.retract_id = live.id)
           AND EXISTS (SELECT 1 FROM webhook_deliveries t
                       WHERE t.id IN (regexp_replace(live.id, '_retract$', '_trade'),
                                      regexp_replace(live.id, '_retract$', '_final'))
                         AND t.state IN ('pending', 'delivered')))
    ON CONFLICT (id) DO UPDATE SET state = 'pending', attempts = 0, next_attempt_ms = $3,
        payload = EXCLUDED.payload,
        claimed_epoch = NULL, claimed_ms = NULL, last_status = NULL, last_error = NULL, done_ms = NULL
    WHERE $11 AND webhook_deliveries.state <> 'pending'
    RETURNING id, claimed_epoch IS NOT NULL AS claimed
), unclaimed AS (
    -- a deliverable trade of a claiming batch that is not in the table claimed by this insert
    -- (it was queued before: a conflict)
    SELECT l.id FROM live l
    WHERE $12 AND l.kind = 'trade' AND NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = l.id AND ins.claimed)
)
SELECT (SELECT ok FROM fence), (SELECT count(*) FROM ins), (SELECT count(*) FROM live),
       coalesce((SELECT array_agg(id ORDER BY id) FROM cancel), '{}'::text[]),
       coalesce((SELECT array_agg(endpoint_id ORDER BY id) FROM cancel), '{}'::bigint[]),
       coalesce((SELECT array_agg(block_number ORDER BY id) FROM cancel), '{}'::bigint[]),
       coalesce((SELECT array_agg(log_index ORDER BY id) FROM cancel), '{}'::int[]),
       coalesce((SELECT array_agg(id) FROM unclaimed), '{}'::text[]),
       coalesce((SELECT array_agg(id ORDER BY id) FROM eps), '{}'::bigint[]),
       coalesce((SELECT array_agg(account_id ORDER BY id) FROM eps), '{}'::bigint[]),
       coalesce((SELECT array_agg(url ORDER BY id) FROM eps), '{}'::text[]),
       coalesce((SELECT array_agg(secret ORDER BY id) FROM eps), '{}'::text[]),
       coalesce((SELECT array_agg(previous_secret ORDER BY id) FROM eps), '{}'::text[]),
       coalesce((SELECT array_agg(previous_expires_ms ORDER BY id) FROM eps), '{}'::bigint[]),
       coalesce((SELECT array_agg((SELECT f.since_ms FROM webhook_failing f WHERE f.endpoint_id = eps.id)
                                  ORDER BY id) FROM eps), '{}'::bigint[])
