-- Visible trades of the hot ledger (the view ledger_visible, migration 0017) after cursor
-- ($1, $2) up to block $3, ledger order, at most $4. Streams in primary-key order: no sort,
-- bounded by the limit.
SELECT {COLUMNS} FROM ledger_visible l
WHERE l.block_number >= $1 AND l.block_number <= $3 AND (l.block_number, l.log_index) > ($1, $2)
ORDER BY l.block_number, l.log_index
LIMIT $4
