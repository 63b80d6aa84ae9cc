UPDATE webhook_endpoints SET enabled = $2, updated_ms = $3,
  disabled_reason = CASE WHEN $2 THEN NULL
    ELSE coalesce(disabled_reason, 'disabled by the account') END
WHERE id = $1 RETURNING {COLUMNS}
