UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_ms = $3
WHERE id = $1 AND enabled
