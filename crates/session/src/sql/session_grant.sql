-- What a new WebSocket session of account $1 with key $2 starts with, in one snapshot: the
-- subscription version, the account's wallets (none if it is disabled), and its plan's session
-- limit (the default plan's when its own is not published; NULL when no plan is published at
-- all), the wallets' filters (as text, in the wallets' order; NULL: none), and whether the key
-- is still live (not revoked, account not disabled) at that version: a key revoked after the
-- connect's key check but before this snapshot has no index change left to close its session.
-- Then its market subscriptions (migration 0019): each one's token ids joined by commas, and
-- its filter (as text; NULL: none), in the same order.
SELECT (SELECT seq FROM subs_version WHERE id = 1),
       ARRAY(SELECT s.wallet FROM subscriptions s JOIN accounts a ON a.id = s.account_id
             WHERE s.account_id = $1 AND a.disabled_ms IS NULL ORDER BY s.wallet),
       (SELECT coalesce((SELECT p.max_ws_sessions FROM plans p WHERE p.name = a.plan),
                        (SELECT p.max_ws_sessions FROM plans p WHERE p.is_default))
        FROM accounts a WHERE a.id = $1),
       ARRAY(SELECT s.filter::text FROM subscriptions s JOIN accounts a ON a.id = s.account_id
             WHERE s.account_id = $1 AND a.disabled_ms IS NULL ORDER BY s.wallet),
       EXISTS (SELECT 1 FROM api_keys k JOIN accounts a ON a.id = k.account_id
               WHERE k.id = $2 AND k.account_id = $1 AND k.revoked_ms IS NULL
                 AND a.disabled_ms IS NULL),
       ARRAY(SELECT array_to_string(m.tokens, ',') FROM market_subscriptions m
             JOIN accounts a ON a.id = m.account_id
             WHERE m.account_id = $1 AND a.disabled_ms IS NULL ORDER BY m.kind, m.market),
       ARRAY(SELECT m.filter::text FROM market_subscriptions m
             JOIN accounts a ON a.id = m.account_id
             WHERE m.account_id = $1 AND a.disabled_ms IS NULL ORDER BY m.kind, m.market)
