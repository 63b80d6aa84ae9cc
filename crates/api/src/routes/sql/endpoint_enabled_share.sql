SELECT enabled FROM webhook_endpoints WHERE id = $1 FOR SHARE
