-- Write account $1's market subscription kind $2, name $3: label $4, resolved conditions $5
-- and tokens $6, filter $7 (text; NULL: none), at $8 ms. A new row is created at $8; an
-- existing one keeps its creation time.
INSERT INTO market_subscriptions
    (account_id, kind, market, label, conditions, tokens, filter, created_ms, updated_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, $8)
ON CONFLICT (account_id, kind, market) DO UPDATE
SET label = EXCLUDED.label, conditions = EXCLUDED.conditions, tokens = EXCLUDED.tokens,
    filter = EXCLUDED.filter, updated_ms = EXCLUDED.updated_ms
RETURNING kind, market, label, conditions, tokens, filter::text, created_ms, updated_ms
