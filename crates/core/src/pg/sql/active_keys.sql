-- The number of active keys of account $1; no row when the account does not exist.
SELECT (SELECT count(*) FROM api_keys WHERE account_id = a.id AND revoked_ms IS NULL)
FROM accounts a WHERE a.id = $1
