-- The slot's webhook-lane cursor, its reorg id, and the hash of its block when still in
-- chain_blocks.
SELECT w.block_number, w.log_index, w.reorg_id,
       (SELECT c.block_hash FROM chain_blocks c WHERE c.block_number = w.block_number)
FROM webhook_cursor w WHERE w.slot = $1
