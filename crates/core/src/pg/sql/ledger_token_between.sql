-- Visible trades (the view ledger_visible, migration 0017) of outcome tokens $1 (any wallet's
-- fills in followed markets, migration 0019) in cursor range (($2, $3), ($4, $5)], ledger order,
-- at most $6.
SELECT {COLUMNS} FROM ledger_visible l
WHERE l.token_id = ANY($1) AND l.block_number >= $2 AND l.block_number <= $4
  AND (l.block_number, l.log_index) > ($2, $3) AND (l.block_number, l.log_index) <= ($4, $5)
ORDER BY l.block_number, l.log_index
LIMIT $6
