-- The webhook lane against the WebSocket rounds: whether its cursor is behind the push cursor,
-- and when it last moved (push queues webhook deliveries in a lane of its own, behind its
-- rounds; a lane that stays behind is webhooks not being queued at all).
SELECT (w.block_number, w.log_index) < (p.block_number, p.log_index), w.updated_ms,
       w.block_number, p.block_number
FROM webhook_cursor w JOIN push_cursor p ON p.slot = w.slot
WHERE w.slot = 0
