SELECT {COLUMNS} FROM trades WHERE block_number >= ? AND block_number <= ?
ORDER BY block_number, log_index, block_hash, version DESC
LIMIT 1 BY block_number, log_index, block_hash
