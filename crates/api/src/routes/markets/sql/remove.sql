-- Stop following account $1's market subscription kind $2, name $3.
DELETE FROM market_subscriptions WHERE account_id = $1 AND kind = $2 AND market = $3
