WITH p AS (SELECT d.endpoint_id, d.next_attempt_ms, d.claimed_epoch, d.claimed_ms
  FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
  WHERE d.state = 'pending')
SELECT EXISTS (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2),
  coalesce((SELECT array_agg(DISTINCT endpoint_id) FROM p WHERE next_attempt_ms <= $3
    AND (claimed_epoch IS DISTINCT FROM $2 OR claimed_ms < $4)), '{}'::bigint[]),
  (SELECT count(*) FROM p),
  (SELECT count(*) FROM p WHERE next_attempt_ms <= $3),
  (SELECT min(next_attempt_ms) FROM p WHERE next_attempt_ms > $3)
