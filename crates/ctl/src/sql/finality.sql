-- The finalized watermark (block, moved at) and push's finality lane (block, log index, moved
-- at), each NULL until it exists.
SELECT f.block_number, f.updated_ms, l.block_number, l.log_index, l.updated_ms
FROM (SELECT 1) one
LEFT JOIN finalized_cursor f ON f.id = 1
LEFT JOIN final_cursor l ON l.slot = 0
