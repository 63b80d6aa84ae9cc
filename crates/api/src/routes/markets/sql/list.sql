-- The account's market subscriptions (migration 0019), oldest first.
SELECT kind, market, label, conditions, tokens, filter::text, created_ms, updated_ms
FROM market_subscriptions WHERE account_id = $1 ORDER BY created_ms, kind, market
