SELECT count(*) FROM webhook_endpoints WHERE account_id = $1
