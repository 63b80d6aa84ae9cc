-- Visible trades of the hot ledger after cursor ($1, $2) up to block $3, ledger order, at most
-- $4: rows that are the newest version of their identity (block, log index, block hash), not
-- retracted, and of the block hash chain_blocks committed for their block (an orphaned row
-- whose retraction is missing is never read). Streams in primary-key order (anti-joins on the
-- key): no sort, bounded by the limit.
SELECT {COLUMNS} FROM ledger l
WHERE l.block_number >= $1 AND l.block_number <= $3 AND (l.block_number, l.log_index) > ($1, $2)
  AND l.retracted = 0
  AND NOT EXISTS (SELECT 1 FROM ledger n
                  WHERE n.block_number = l.block_number AND n.log_index = l.log_index
                    AND n.block_hash = l.block_hash AND n.version > l.version)
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = l.block_number AND c.block_hash <> l.block_hash)
ORDER BY l.block_number, l.log_index
LIMIT $4
