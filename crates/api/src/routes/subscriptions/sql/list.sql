SELECT wallet, label, created_ms, filter::text FROM subscriptions WHERE account_id = $1
ORDER BY created_ms, wallet
