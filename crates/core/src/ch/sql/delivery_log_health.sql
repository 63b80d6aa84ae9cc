-- API: an endpoint's attempts since a time, and how many delivered (its success rate).
SELECT count() AS attempts, countIf(outcome = 'delivered') AS delivered
FROM delivery_log
WHERE endpoint_id = ? AND t_attempt_ms >= ?
