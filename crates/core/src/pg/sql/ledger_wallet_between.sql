-- Visible trades of wallets $1 (their own fills: maker) in cursor range (($2, $3), ($4, $5)],
-- ledger order, at most $6, with the same visibility rule as ledger_visible_after.sql.
SELECT {COLUMNS} FROM (
    SELECT DISTINCT ON (block_number, log_index, block_hash) {COLUMNS}
    FROM ledger
    WHERE maker = ANY($1) AND block_number >= $2 AND block_number <= $4
      AND (block_number, log_index) > ($2, $3) AND (block_number, log_index) <= ($4, $5)
    ORDER BY block_number, log_index, block_hash, version DESC
) v
WHERE retracted = 0
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = v.block_number AND c.block_hash <> v.block_hash)
ORDER BY block_number, log_index
LIMIT $6
