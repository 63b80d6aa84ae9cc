-- One audited range: $1 from, $2 to, $3 fills checked, $4 missing, $5 extra, $6 now (ms),
-- $7 the ingest watermark then, $8 the block time of `to` (ms).
INSERT INTO audit_ranges (from_block, to_block, fills_checked, missing, extra, audited_ms,
                          head_block, to_block_time_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
