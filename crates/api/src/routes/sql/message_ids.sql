-- The chat messages that carried the deliveries $1 (those that have one).
SELECT id, message_id FROM webhook_deliveries WHERE id = ANY ($1) AND message_id IS NOT NULL
