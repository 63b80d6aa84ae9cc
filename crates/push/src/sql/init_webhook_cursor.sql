-- The webhook lane starts where the push cursor stands when it has no cursor of its own yet.
INSERT INTO webhook_cursor (slot, block_number, log_index, reorg_id, epoch, updated_ms)
SELECT slot, block_number, log_index, reorg_id, epoch, updated_ms FROM push_cursor WHERE slot = $1
ON CONFLICT (slot) DO NOTHING
