-- Store endpoint $1's secrets sealed again: $2 the current one, $3 the previous one (or NULL).
UPDATE webhook_endpoints SET secret = $2, previous_secret = $3 WHERE id = $1
