-- What the finality step compares with the chain, in one snapshot: the ingest watermark, the
-- finalized watermark, and the stored hash of block $1 (the candidate).
SELECT (SELECT block_number FROM ingest_cursor WHERE id = 1),
       (SELECT block_number FROM finalized_cursor WHERE id = 1),
       (SELECT block_hash FROM chain_blocks WHERE block_number = $1)
