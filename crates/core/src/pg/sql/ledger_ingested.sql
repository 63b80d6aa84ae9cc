-- When the trade at ($1, $2) in the block whose hash starts with $3 was ingested: the newest
-- version of its not-retracted rows (ms), NULL when the hot ledger never held it.
SELECT max(version) FROM ledger
WHERE block_number = $1 AND log_index = $2 AND starts_with(block_hash, $3) AND retracted = 0
