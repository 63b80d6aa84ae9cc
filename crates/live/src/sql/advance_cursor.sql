-- Move the ingest watermark, only while this writer still holds the live lock ({fence}).
INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms)
SELECT 1, $1, $2, $3 WHERE {fence}
ON CONFLICT (id) DO UPDATE
SET block_number = EXCLUDED.block_number, block_hash = EXCLUDED.block_hash,
    updated_ms = EXCLUDED.updated_ms
WHERE {fence}
