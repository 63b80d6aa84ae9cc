-- API: an endpoint's newest attempt that did not deliver.
SELECT t_attempt_ms, status_code, outcome, error
FROM delivery_log
WHERE endpoint_id = ? AND outcome != 'delivered'
ORDER BY t_attempt_ms DESC, delivery_id DESC, attempt DESC
LIMIT 1
