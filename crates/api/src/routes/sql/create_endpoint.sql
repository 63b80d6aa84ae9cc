INSERT INTO webhook_endpoints (account_id, url, secret, created_ms, updated_ms, events)
VALUES ($1, $2, $3, $4, $4, $5) RETURNING {COLUMNS}
