-- An endpoint's backlog: deliveries pending, those already retried, the oldest pending one's
-- creation, and since when every attempt has failed (the dispatcher's failing mark).
SELECT count(*) FILTER (WHERE d.state = 'pending'),
       count(*) FILTER (WHERE d.state = 'pending' AND d.attempts > 0),
       min(d.created_ms) FILTER (WHERE d.state = 'pending'),
       (SELECT since_ms FROM webhook_failing WHERE endpoint_id = $1)
FROM webhook_deliveries d
WHERE d.endpoint_id = $1 AND d.state = 'pending'
