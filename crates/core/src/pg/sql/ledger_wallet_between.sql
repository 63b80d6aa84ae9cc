-- Visible trades of wallets $1 (their own fills: maker) in cursor range (($2, $3), ($4, $5)],
-- ledger order, at most $6, with the same visibility rule as ledger_visible_after.sql.
SELECT {COLUMNS} FROM ledger l
WHERE l.maker = ANY($1) AND l.block_number >= $2 AND l.block_number <= $4
  AND (l.block_number, l.log_index) > ($2, $3) AND (l.block_number, l.log_index) <= ($4, $5)
  AND l.retracted = 0
  AND NOT EXISTS (SELECT 1 FROM ledger n
                  WHERE n.block_number = l.block_number AND n.log_index = l.log_index
                    AND n.block_hash = l.block_hash AND n.version > l.version)
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = l.block_number AND c.block_hash <> l.block_hash)
ORDER BY l.block_number, l.log_index
LIMIT $6
