-- Move the ingest watermark, only while this writer still holds the live lock (the fence
-- predicate, filled in by the code): $1 = block, $2 = hash, $3 = now (ms), $4 = writer epoch.
INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms)
SELECT 1, $1, $2, $3 WHERE {fence}
ON CONFLICT (id) DO UPDATE
SET block_number = EXCLUDED.block_number, block_hash = EXCLUDED.block_hash,
    updated_ms = EXCLUDED.updated_ms
WHERE {fence}
