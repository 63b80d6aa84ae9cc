-- Where the completeness audit stands, in one snapshot: the audited watermark, the finalized
-- watermark, the ingest watermark and the lowest block chain_blocks still holds.
SELECT (SELECT block_number FROM audit_cursor WHERE id = 1),
       (SELECT block_number FROM finalized_cursor WHERE id = 1),
       (SELECT block_number FROM ingest_cursor WHERE id = 1),
       (SELECT min(block_number) FROM chain_blocks)
