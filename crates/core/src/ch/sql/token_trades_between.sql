-- Visible trades of some outcome tokens (followed markets) in a cursor range: the newest version
-- of each identity, retracted ones left out, ledger order. An IN list (18.16 has no array IN);
-- the code fills in the list of quoted, validated decimal token ids. Binds: after block, through
-- block, after (block, log index), through (block, log index), limit.
SELECT {COLUMNS} FROM (
  SELECT {COLUMNS} FROM trades
  WHERE token_id IN ({list}) AND block_number >= ? AND block_number <= ?
  ORDER BY block_number, log_index, block_hash, version DESC
  LIMIT 1 BY block_number, log_index, block_hash
) WHERE retracted = 0 AND (block_number, log_index) > (?, ?) AND (block_number, log_index) <= (?, ?)
ORDER BY block_number, log_index LIMIT ?
