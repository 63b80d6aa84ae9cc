-- The recorded blocks of a catch-up span ($1, $2]: number, hash and stored trade count (NULL when
-- recorded before counts were).
SELECT block_number, block_hash, trade_count FROM chain_blocks
WHERE block_number > $1 AND block_number <= $2 ORDER BY block_number
