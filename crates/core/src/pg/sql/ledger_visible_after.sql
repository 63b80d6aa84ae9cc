-- Visible trades of the hot ledger after cursor ($1, $2) up to block $3, ledger order, at most
-- $4: per identity the newest version, retracted ones dropped, and only rows whose block hash is
-- the one chain_blocks committed for their block (an orphaned row whose retraction is missing
-- is never read). Streams in primary-key order: no sort, bounded by the limit.
SELECT {COLUMNS} FROM (
    SELECT DISTINCT ON (block_number, log_index, block_hash) {COLUMNS}
    FROM ledger
    WHERE block_number >= $1 AND block_number <= $3 AND (block_number, log_index) > ($1, $2)
    ORDER BY block_number, log_index, block_hash, version DESC
) v
WHERE retracted = 0
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = v.block_number AND c.block_hash <> v.block_hash)
ORDER BY block_number, log_index
LIMIT $4
