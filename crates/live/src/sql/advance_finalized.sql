-- Move the finalized watermark forward (never back), only while this writer still holds the
-- live lock (the fence predicate, filled in by the code), and never above the ingest watermark
-- or onto a block whose stored hash is not the one the chain finalized:
-- $1 = block, $2 = hash, $3 = now (ms), $4 = writer epoch.
INSERT INTO finalized_cursor (id, block_number, block_hash, updated_ms)
SELECT 1, $1, $2, $3
WHERE {fence}
  AND EXISTS (SELECT 1 FROM ingest_cursor WHERE id = 1 AND block_number >= $1)
  AND EXISTS (SELECT 1 FROM chain_blocks WHERE block_number = $1 AND block_hash = $2)
ON CONFLICT (id) DO UPDATE
SET block_number = EXCLUDED.block_number, block_hash = EXCLUDED.block_hash,
    updated_ms = EXCLUDED.updated_ms
WHERE finalized_cursor.block_number < EXCLUDED.block_number AND {fence}
