SELECT max(version) FROM trades
WHERE block_number = ? AND log_index = ? AND startsWith(block_hash, ?) AND retracted = 0
