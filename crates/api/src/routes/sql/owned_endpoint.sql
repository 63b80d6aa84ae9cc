SELECT {COLUMNS} FROM webhook_endpoints WHERE id = $1 AND account_id = $2
