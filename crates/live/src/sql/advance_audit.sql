-- Move the audited watermark forward (never back), only while this writer still holds the live
-- lock (the fence predicate, filled in by the code), and never above the finalized watermark:
-- $1 = block, $2 = now (ms), $3 = writer epoch.
INSERT INTO audit_cursor (id, block_number, updated_ms)
SELECT 1, $1, $2
WHERE {fence}
  AND EXISTS (SELECT 1 FROM finalized_cursor WHERE id = 1 AND block_number >= $1)
ON CONFLICT (id) DO UPDATE
SET block_number = EXCLUDED.block_number, updated_ms = EXCLUDED.updated_ms
WHERE audit_cursor.block_number < EXCLUDED.block_number AND {fence}
