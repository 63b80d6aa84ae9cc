SELECT a.id, a.name, a.email, a.plan, a.created_ms, a.disabled_ms,
  (SELECT count(*) FROM subscriptions WHERE account_id = a.id),
  (SELECT count(*) FROM webhook_endpoints WHERE account_id = a.id),
  (SELECT count(*) FROM api_keys WHERE account_id = a.id AND revoked_ms IS NULL),
  (SELECT count(DISTINCT c) FROM market_subscriptions m, unnest(m.conditions) c
   WHERE m.account_id = a.id)
FROM accounts a WHERE a.id = $1
