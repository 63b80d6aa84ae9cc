-- The completeness audit now: the audited watermark (and when it moved), the ingest watermark,
-- and the block times of both (chain_blocks; NULL once pruned).
SELECT a.block_number, a.updated_ms, i.block_number,
       (SELECT block_time_ms FROM chain_blocks WHERE block_number = a.block_number),
       (SELECT block_time_ms FROM chain_blocks WHERE block_number = i.block_number)
FROM audit_cursor a LEFT JOIN ingest_cursor i ON i.id = 1
WHERE a.id = 1
