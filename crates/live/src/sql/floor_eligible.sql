-- May the hot ledger's floor rise to $1 (the end of the lowest partition above the floor)?
-- Only when every row of the blocks below it is projected, they are finalized and audited (no
-- reorg or audit correction can append to them again: the audit only when it runs), and block
-- $1 - 1 is older than the retention window ($2: its oldest allowed block time, ms).
SELECT NOT EXISTS (SELECT 1 FROM ledger l, stored_cursor s
                   WHERE s.id = 1 AND l.seq > s.seq AND l.block_number < $1)
   AND coalesce((SELECT block_number FROM finalized_cursor WHERE id = 1), -1) >= $1 - 1
   AND coalesce((SELECT block_number FROM audit_cursor WHERE id = 1), $1 - 1) >= $1 - 1
   AND coalesce((SELECT block_time_ms FROM chain_blocks WHERE block_number = $1 - 1), 0) < $2
