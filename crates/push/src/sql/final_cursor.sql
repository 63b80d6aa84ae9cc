-- The slot's finality-lane cursor, its reorg id, and the hash of its block when still in
-- chain_blocks.
SELECT f.block_number, f.log_index, f.reorg_id,
       (SELECT c.block_hash FROM chain_blocks c WHERE c.block_number = f.block_number)
FROM final_cursor f WHERE f.slot = $1
