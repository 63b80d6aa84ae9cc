-- Whether the hot ledger already holds a visible trade of transaction $1 (a late sighting of a
-- mined settlement: not recorded open). Looked up through ledger_maker by its makers ($2) over
-- the blocks within $3 of the watermark (a pending sighting of an older transaction is no news).
SELECT EXISTS (
    SELECT 1 FROM ledger_visible
    WHERE maker = ANY ($2::text[])
      AND block_number > coalesce((SELECT block_number FROM ingest_cursor WHERE id = 1), 0) - $3
      AND tx_hash = $1
)
