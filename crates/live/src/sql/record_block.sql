INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (block_number) DO UPDATE
SET block_hash = EXCLUDED.block_hash, parent_hash = EXCLUDED.parent_hash,
    block_time_ms = EXCLUDED.block_time_ms, t_detect_ms = EXCLUDED.t_detect_ms,
    backfilled = EXCLUDED.backfilled, trade_count = EXCLUDED.trade_count
