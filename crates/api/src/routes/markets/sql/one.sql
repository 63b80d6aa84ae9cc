-- One market subscription of account $1: kind $2, name $3.
SELECT kind, market, label, conditions, tokens, filter::text, created_ms, updated_ms
FROM market_subscriptions WHERE account_id = $1 AND kind = $2 AND market = $3
