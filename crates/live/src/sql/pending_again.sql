-- Another provider announced a recorded transaction: its first time ($3, ms) under its name
-- ($2), unless that provider's is there already. $1 tx hash.
UPDATE pending_txs
SET seen_by = seen_by || jsonb_build_object($2::text, $3::bigint)
WHERE tx_hash = $1 AND NOT seen_by ? $2::text
