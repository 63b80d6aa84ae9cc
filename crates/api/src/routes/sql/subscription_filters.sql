SELECT wallet, filter::text FROM subscriptions WHERE account_id = $1 AND filter IS NOT NULL
