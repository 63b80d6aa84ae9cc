-- Visible hot-ledger trades after cursor ($1, $2) up to block $3 (the same visibility rule as
-- ledger_visible_after.sql): what push has still to deliver.
SELECT count(*) FROM (
    SELECT DISTINCT ON (block_number, log_index, block_hash) block_number, block_hash, retracted
    FROM ledger
    WHERE block_number >= $1 AND block_number <= $3 AND (block_number, log_index) > ($1, $2)
    ORDER BY block_number, log_index, block_hash, version DESC
) v
WHERE retracted = 0
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = v.block_number AND c.block_hash <> v.block_hash)
