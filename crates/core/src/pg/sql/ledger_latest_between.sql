-- The newest version of every trade identity of the hot ledger (the view ledger_latest,
-- migration 0017) in blocks $1..=$2, retracted or not, in ledger order: what the completeness
-- audit compares with the chain.
SELECT {COLUMNS} FROM ledger_latest
WHERE block_number >= $1 AND block_number <= $2
ORDER BY block_number, log_index, block_hash
