-- A new API key: $1 account, $2 prefix, $3 SHA-256 of the key, $4 label, $5 created_ms.
INSERT INTO api_keys (account_id, prefix, key_hash, label, created_ms)
VALUES ($1, $2, $3, $4, $5)
