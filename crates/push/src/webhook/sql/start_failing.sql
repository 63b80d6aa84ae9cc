INSERT INTO webhook_failing (endpoint_id, since_ms) VALUES ($1, $2)
ON CONFLICT (endpoint_id) DO NOTHING
