-- Expire endpoint $1's pending deliveries: failed with last_error $2, done at $3.
UPDATE webhook_deliveries SET state = 'failed', last_error = $2, done_ms = $3
WHERE endpoint_id = $1 AND state = 'pending'
