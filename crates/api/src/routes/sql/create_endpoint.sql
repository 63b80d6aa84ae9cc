INSERT INTO webhook_endpoints (account_id, url, secret, created_ms, updated_ms, filter)
VALUES ($1, $2, $3, $4, $4, $5::text::jsonb) RETURNING {COLUMNS}
