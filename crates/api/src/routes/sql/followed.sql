SELECT wallet FROM subscriptions WHERE account_id = $1
