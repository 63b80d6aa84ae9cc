-- Revoke the active key with prefix $1 at $2, only if it is account $3's when $3 is not null.
UPDATE api_keys SET revoked_ms = $2
WHERE prefix = $1 AND revoked_ms IS NULL AND ($3::bigint IS NULL OR account_id = $3)
RETURNING account_id
