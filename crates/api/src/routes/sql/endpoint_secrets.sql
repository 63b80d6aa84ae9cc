SELECT url, secret, previous_secret, previous_expires_ms, kind FROM webhook_endpoints
WHERE id = $1 AND account_id = $2
