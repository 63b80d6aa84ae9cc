-- Change an endpoint: $2 = enabled (NULL: unchanged), $3 = now, $4 = events (NULL: unchanged).
UPDATE webhook_endpoints SET enabled = coalesce($2, enabled), updated_ms = $3,
  events = coalesce($4, events),
  disabled_reason = CASE WHEN coalesce($2, enabled) THEN NULL
    ELSE coalesce(disabled_reason, 'disabled by the account') END
WHERE id = $1 RETURNING {COLUMNS}
