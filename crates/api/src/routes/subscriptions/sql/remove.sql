DELETE FROM subscriptions WHERE account_id = $1 AND wallet = ANY($2)
