SELECT {COLUMNS} FROM (
  SELECT {COLUMNS} FROM trades WHERE block_number = ? AND block_hash = ?
  ORDER BY log_index, version DESC LIMIT 1 BY block_number, log_index, block_hash
) WHERE retracted = 0 ORDER BY log_index
