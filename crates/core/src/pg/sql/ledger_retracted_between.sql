-- Trades of the hot ledger whose newest version is a retraction, in blocks ($1, $2], ledger
-- order (any block hash: these are what a client may hold of an orphaned block).
SELECT {COLUMNS} FROM (
    SELECT DISTINCT ON (block_number, log_index, block_hash) {COLUMNS}
    FROM ledger WHERE block_number > $1 AND block_number <= $2
    ORDER BY block_number, log_index, block_hash, version DESC
) v
WHERE retracted = 1 ORDER BY block_number, log_index
