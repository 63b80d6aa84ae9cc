SELECT count(*) FROM subscriptions WHERE account_id = $1
