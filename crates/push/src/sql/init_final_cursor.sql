-- The finality lane starts, when it has no cursor of its own yet, at the webhook lane's cursor
-- or after the finalized watermark's block, whichever is lower ($2 = the last log index).
INSERT INTO final_cursor (slot, block_number, log_index, reorg_id, epoch, updated_ms)
SELECT w.slot,
       CASE WHEN f.block_number < w.block_number THEN f.block_number ELSE w.block_number END,
       CASE WHEN f.block_number < w.block_number THEN $2 ELSE w.log_index END,
       w.reorg_id, w.epoch, w.updated_ms
FROM webhook_cursor w LEFT JOIN finalized_cursor f ON f.id = 1
WHERE w.slot = $1
ON CONFLICT (slot) DO NOTHING
