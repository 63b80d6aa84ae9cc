-- Trades of the hot ledger whose newest version (the view ledger_latest, migration 0017) is a
-- retraction, in blocks ($1, $2], ledger order (any block hash: these are what a client may hold
-- of an orphaned block).
SELECT {COLUMNS} FROM ledger_latest
WHERE block_number > $1 AND block_number <= $2 AND retracted = 1
ORDER BY block_number, log_index, block_hash
