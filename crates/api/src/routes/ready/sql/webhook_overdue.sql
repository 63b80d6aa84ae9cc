-- Webhook deliveries due before $1 and not claimed since $2 (none while a dispatcher runs),
-- leaving out retracts and finals that wait behind their trade's delivery: how many, and the oldest due time.
SELECT count(*), min(d.next_attempt_ms)
FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
WHERE d.state = 'pending' AND d.next_attempt_ms < $1
  AND (d.claimed_ms IS NULL OR d.claimed_ms < $2)
  AND NOT (d.kind IN ('retract', 'final') AND EXISTS (
    SELECT 1 FROM webhook_deliveries t
    WHERE t.id = regexp_replace(d.id, '_(retract|final)$', '_trade') AND t.state = 'pending'))
