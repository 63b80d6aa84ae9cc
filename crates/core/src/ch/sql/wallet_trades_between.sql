-- Visible trades of some wallets in a cursor range: the per-wallet table, the newest version of
-- each identity, retracted ones left out, ledger order. An IN list over the primary key's first
-- column (18.16 has no array IN); the code fills in the list of quoted, validated lowercase
-- addresses. Binds: after block, through block, after (block, log index), through (block, log
-- index), limit.
SELECT {COLUMNS} FROM (
  SELECT {COLUMNS} FROM trades_by_wallet
  WHERE wallet IN ({list}) AND block_number >= ? AND block_number <= ?
  ORDER BY wallet, block_number, log_index, block_hash, version DESC
  LIMIT 1 BY wallet, block_number, log_index, block_hash
) WHERE retracted = 0 AND (block_number, log_index) > (?, ?) AND (block_number, log_index) <= (?, ?)
ORDER BY block_number, log_index LIMIT ?
