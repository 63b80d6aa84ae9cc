-- Visible hot-ledger trades (the view ledger_visible, migration 0017) after cursor ($1, $2) up
-- to block $3: what push has still to deliver.
SELECT count(*) FROM ledger_visible
WHERE block_number >= $1 AND block_number <= $3 AND (block_number, log_index) > ($1, $2)
