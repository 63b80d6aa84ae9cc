-- A chat endpoint's new destination: $2 the url shown, $3 the sealed destination.
UPDATE webhook_endpoints SET url = $2, secret = $3 WHERE id = $1
