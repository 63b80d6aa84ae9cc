SELECT {COLUMNS} FROM webhook_endpoints WHERE account_id = $1 ORDER BY id
