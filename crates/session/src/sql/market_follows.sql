-- Every enabled account's followed markets (migration 0019): the account, the outcome token ids
-- its subscription resolved to, and the subscription's filter (as text; NULL: none), ordered by
-- account so the index lists each follower of a token once.
SELECT m.account_id, m.tokens, m.filter::text
FROM market_subscriptions m JOIN accounts a ON a.id = m.account_id
WHERE a.disabled_ms IS NULL
ORDER BY m.account_id
