UPDATE webhook_endpoints SET previous_secret = CASE WHEN $4::bigint IS NULL THEN NULL ELSE secret END,
  previous_expires_ms = $4, secret = $3, updated_ms = $5
WHERE id = $1 AND account_id = $2 AND kind = 'webhook' RETURNING {COLUMNS}
