-- The pending fills (migration 0023) that the ledger rows of blocks $1..=$2 confirmed: a replay
-- page's trades name them as live trades do. Every version of a row carries its pending_id.
SELECT block_number, log_index, block_hash, pending_id
FROM ledger
WHERE block_number >= $1 AND block_number <= $2 AND pending_id IS NOT NULL
