-- A new API key: $1 account, $2 prefix, $3 SHA-256 of the key, $4 label, $5 created_ms. No row
-- is inserted when the prefix (or hash) is taken: the caller draws another key.
INSERT INTO api_keys (account_id, prefix, key_hash, label, created_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING
