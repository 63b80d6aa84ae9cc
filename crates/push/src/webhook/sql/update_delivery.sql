-- One attempt's result; a delivered row keeps no body (migration 0028).
WITH {FENCE}, d AS (
  UPDATE webhook_deliveries SET state = $4, attempts = $5, next_attempt_ms = $6,
    last_status = $7, last_error = $8, done_ms = $9,
    payload = CASE WHEN $4 = 'delivered' THEN NULL ELSE payload END,
    claimed_epoch = CASE WHEN $4 = 'pending' THEN NULL ELSE claimed_epoch END,
    claimed_ms = CASE WHEN $4 = 'pending' THEN NULL ELSE claimed_ms END
  WHERE id = $3 AND claimed_epoch = $2 AND (state = 'pending' OR $4 = 'delivered')
    AND EXISTS (SELECT 1 FROM fence)
  RETURNING 1),
-- a trade that failed for good was never delivered: its waiting retract is cancelled with it
r AS (
  UPDATE webhook_deliveries SET state = 'failed', done_ms = $9,
    last_error = 'cancelled: its trade was never delivered'
  WHERE $4 = 'failed' AND id = regexp_replace($3, '_trade$', '_retract') AND state = 'pending'
    AND EXISTS (SELECT 1 FROM d))
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM d)
