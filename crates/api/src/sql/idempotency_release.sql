DELETE FROM idempotency_keys
WHERE account_id = $1 AND key = $2 AND created_ms = $3 AND status IS NULL
