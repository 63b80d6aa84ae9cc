-- Change an endpoint: $2 enabled (NULL: unchanged), $3 now, $4 whether the filter changes, to
-- $5 (text of the canonical spec, NULL: none), $6 events (NULL: unchanged).
UPDATE webhook_endpoints SET enabled = coalesce($2, enabled), updated_ms = $3,
  filter = CASE WHEN $4 THEN $5::text::jsonb ELSE filter END,
  events = coalesce($6, events),
  disabled_reason = CASE WHEN coalesce($2, enabled) THEN NULL
    ELSE coalesce(disabled_reason, 'disabled by the account') END
WHERE id = $1 RETURNING {COLUMNS}
