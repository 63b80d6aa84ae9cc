-- The slot's push cursor, its reorg id, and the hash of its block when still in chain_blocks.
SELECT p.block_number, p.log_index, p.reorg_id,
       (SELECT c.block_hash FROM chain_blocks c WHERE c.block_number = p.block_number)
FROM push_cursor p WHERE p.slot = $1
