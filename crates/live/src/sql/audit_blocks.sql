-- The recorded blocks of an audit range $1..=$2: number, canonical hash, trade count, time.
SELECT block_number, block_hash, trade_count, block_time_ms FROM chain_blocks
WHERE block_number >= $1 AND block_number <= $2 ORDER BY block_number
