SELECT a.id,
  (SELECT count(*) FROM api_keys WHERE account_id = a.id AND revoked_ms IS NULL),
  (SELECT count(*) FROM subscriptions WHERE account_id = a.id),
  (SELECT count(*) FROM webhook_endpoints WHERE account_id = a.id),
  (SELECT count(*) FROM market_subscriptions WHERE account_id = a.id)
FROM accounts a ORDER BY a.id
