-- Trades stored after the push cursor up to the watermark, each trade once (its newest version),
-- retracted ones left out. Binds: cursor block, watermark block, cursor block, cursor log index.
SELECT count() FROM (SELECT block_number, log_index, retracted FROM trades
    WHERE block_number >= ? AND block_number <= ?
    ORDER BY block_number, log_index, block_hash, version DESC
    LIMIT 1 BY block_number, log_index, block_hash)
WHERE retracted = 0 AND (block_number, log_index) > (?, ?)
