-- The newest version of every trade identity of the hot ledger in blocks $1..=$2, retracted or
-- not, in ledger order: what the completeness audit compares with the chain.
SELECT DISTINCT ON (block_number, log_index, block_hash) {COLUMNS}
FROM ledger WHERE block_number >= $1 AND block_number <= $2
ORDER BY block_number, log_index, block_hash, version DESC
