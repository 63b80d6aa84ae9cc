INSERT INTO webhook_endpoints (id, account_id, url, secret, created_ms, updated_ms, events, filter, kind)
VALUES ($7, $1, $2, $3, $4, $4, $5, $6::text::jsonb, $8) RETURNING {COLUMNS}
