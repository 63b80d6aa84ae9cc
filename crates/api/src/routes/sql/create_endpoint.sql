INSERT INTO webhook_endpoints (account_id, url, secret, created_ms, updated_ms)
VALUES ($1, $2, $3, $4, $4) RETURNING {COLUMNS}
