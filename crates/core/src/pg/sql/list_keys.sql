-- The keys of account $1, newest first.
SELECT prefix, label, created_ms, revoked_ms FROM api_keys WHERE account_id = $1
ORDER BY created_ms DESC, id DESC
