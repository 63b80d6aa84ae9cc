UPDATE idempotency_keys SET status = $4, content_type = $5, body = $6
WHERE account_id = $1 AND key = $2 AND created_ms = $3 AND status IS NULL
