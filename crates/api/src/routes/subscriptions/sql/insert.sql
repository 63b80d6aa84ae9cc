INSERT INTO subscriptions (account_id, wallet, label, created_ms, filter)
VALUES ($1, $2, $3, $4, $5::text::jsonb)
