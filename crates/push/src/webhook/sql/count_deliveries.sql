-- The backlog for health and metrics: pending deliveries of enabled endpoints, and how many of
-- them are due ($1 = now).
SELECT count(*), count(*) FILTER (WHERE d.next_attempt_ms <= $1)
FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
WHERE d.state = 'pending'
