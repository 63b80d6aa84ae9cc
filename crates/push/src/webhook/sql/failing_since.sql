-- When endpoint $1's current run of failed attempts began (no row: it is not failing).
SELECT since_ms FROM webhook_failing WHERE endpoint_id = $1
