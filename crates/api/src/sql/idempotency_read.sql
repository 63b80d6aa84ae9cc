SELECT fingerprint, status, content_type, body FROM idempotency_keys
WHERE account_id = $1 AND key = $2
