SELECT k.account_id, k.id, k.prefix, a.plan FROM api_keys k JOIN accounts a ON a.id = k.account_id
WHERE k.key_hash = $1 AND k.revoked_ms IS NULL AND a.disabled_ms IS NULL
