-- The number of active keys of account $1 (read after its row is locked).
SELECT count(*) FROM api_keys WHERE account_id = $1 AND revoked_ms IS NULL
