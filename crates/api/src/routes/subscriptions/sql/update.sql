UPDATE subscriptions SET label = coalesce($3, label),
  filter = CASE WHEN $4 THEN $5::text::jsonb ELSE filter END
WHERE account_id = $1 AND wallet = $2
RETURNING wallet, label, created_ms, filter::text
