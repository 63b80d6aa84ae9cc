-- The watermark ($2) at which no provider's pool had transaction $1 any more (NULL: one has it
-- again); only set once, so the dropped grace counts from the first time.
UPDATE pending_txs SET gone_block = CASE WHEN $2::bigint IS NULL THEN NULL
                                         ELSE coalesce(gone_block, $2::bigint) END
WHERE tx_hash = $1 AND status = 'open'
