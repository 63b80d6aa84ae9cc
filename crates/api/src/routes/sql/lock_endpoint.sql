SELECT enabled, kind, secret FROM webhook_endpoints WHERE id = $1 AND account_id = $2 FOR NO KEY UPDATE
