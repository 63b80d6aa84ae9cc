-- Forget the orphaned blocks above the common ancestor and record the reorg (in one transaction
-- with the watermark move back to the ancestor).
DELETE FROM chain_blocks WHERE block_number > $1
