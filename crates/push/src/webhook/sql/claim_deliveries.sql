-- Claim due deliveries in ledger order, up to $5 per endpoint, for the enabled endpoints
-- $6 (NULL: every endpoint) except those in $7 (queues already running): one statement for a
-- whole scan. A delivery is claimable when due ($3) and not claimed by this epoch, or claimed
-- before $4 (the claim ttl). A retract or a final waits until its trade's delivery is done
-- (delivered, or failed), a void until its pending's; a pending is passed over once its fill
-- ended (the pending lane's cancel_ended_pending.sql then cancels it). Per endpoint one probe
-- of the pending index, so a scan costs the endpoints, not the backlog. Returns (fence holds, when the next delivery not due yet falls
-- due, then one claimed delivery per row, or one row of NULLs when none).
WITH {FENCE}, eps AS MATERIALIZED (
  SELECT e.id, e.account_id, e.url, e.secret, e.previous_secret, e.previous_expires_ms
  FROM webhook_endpoints e
  WHERE e.enabled AND ($6::bigint IS NULL OR e.id = $6) AND e.id <> ALL ($7::bigint[])
    AND EXISTS (SELECT 1 FROM fence)),
due AS (
  SELECT q.id FROM eps CROSS JOIN LATERAL (
    SELECT d.id FROM webhook_deliveries d
    WHERE d.endpoint_id = eps.id AND d.state = 'pending' AND d.next_attempt_ms <= $3
      AND (d.claimed_epoch IS DISTINCT FROM $2 OR d.claimed_ms < $4)
      AND NOT (d.kind IN ('retract', 'final', 'void') AND EXISTS (
        SELECT 1 FROM webhook_deliveries t
        WHERE t.id = regexp_replace(regexp_replace(d.id, '_(retract|final)$', '_trade'),
                                    '_void$', '_pending')
          AND t.state = 'pending'))
      AND NOT (d.kind = 'pending' AND NOT EXISTS (
        SELECT 1 FROM pending_fills f
        WHERE f.id = substring(d.id FROM '^msg_pending-([0-9]+)_')::bigint AND f.status = 'open'))
    ORDER BY d.block_number, d.log_index, d.id LIMIT $5 FOR UPDATE SKIP LOCKED) q),
upd AS (
  UPDATE webhook_deliveries d SET claimed_epoch = $2, claimed_ms = $3
  FROM due, eps e
  WHERE d.id = due.id AND e.id = d.endpoint_id
  RETURNING d.id, d.endpoint_id, e.account_id, d.kind, d.block_number, d.log_index, d.payload,
    d.attempts, d.t_detect_ms, e.url, e.secret, e.previous_secret, e.previous_expires_ms,
    (SELECT f.since_ms FROM webhook_failing f WHERE f.endpoint_id = d.endpoint_id))
SELECT (SELECT count(*) FROM fence),
  CASE WHEN $6::bigint IS NULL THEN (SELECT min(d.next_attempt_ms) FROM webhook_deliveries d
    WHERE d.state = 'pending' AND d.next_attempt_ms > $3) END,
  upd.*
FROM (SELECT 1) one LEFT JOIN upd ON true
