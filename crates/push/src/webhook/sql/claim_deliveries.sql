WITH {FENCE}, due AS (
  SELECT d.id FROM webhook_deliveries d
  WHERE d.endpoint_id = $3 AND d.state = 'pending' AND d.next_attempt_ms <= $4
    AND (d.claimed_epoch IS DISTINCT FROM $2 OR d.claimed_ms < $5)
    AND EXISTS (SELECT 1 FROM fence)
    -- a retract or a final waits until its trade's delivery is done (delivered, or failed)
    AND NOT (d.kind IN ('retract', 'final') AND EXISTS (
      SELECT 1 FROM webhook_deliveries t
      WHERE t.id = regexp_replace(d.id, '_(retract|final)$', '_trade') AND t.state = 'pending'))
  ORDER BY d.block_number, d.log_index, d.id LIMIT $6 FOR UPDATE SKIP LOCKED),
upd AS (
  UPDATE webhook_deliveries d SET claimed_epoch = $2, claimed_ms = $4
  FROM due, webhook_endpoints e
  WHERE d.id = due.id AND e.id = d.endpoint_id AND e.enabled
  RETURNING d.id, d.endpoint_id, e.account_id, d.kind, d.block_number, d.log_index, d.payload::text,
    d.attempts, d.t_detect_ms, e.url, e.secret, e.previous_secret, e.previous_expires_ms,
    (SELECT f.since_ms FROM webhook_failing f WHERE f.endpoint_id = d.endpoint_id))
SELECT (SELECT count(*) FROM fence), upd.* FROM (SELECT 1) one LEFT JOIN upd ON true
