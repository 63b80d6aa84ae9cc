-- The corrected trade count of an audited block ($1 block, $2 its recorded hash, $3 count):
-- what push's bounded catch-up checks its reads against.
UPDATE chain_blocks SET trade_count = $3 WHERE block_number = $1 AND block_hash = $2
