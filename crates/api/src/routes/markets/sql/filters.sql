-- Account $1's followed markets as push matches them: each subscription's tokens and filter
-- (as text; NULL: none).
SELECT tokens, filter::text FROM market_subscriptions WHERE account_id = $1
