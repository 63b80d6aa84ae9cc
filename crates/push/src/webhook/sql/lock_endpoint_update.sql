-- Lock endpoint $1 before it is disabled, as the API does before it expires deliveries (no
-- deadlock with it). No row: it is gone.
SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE
