-- The transactions with a fill still open (or `unwound`: a reorg took its confirming trade
-- back), oldest first, at most $1: what the resolution on a new head asks the providers about.
SELECT x.tx_hash, x.sender, x.nonce, x.seen_block, x.gone_block
FROM pending_txs x
WHERE x.tx_hash IN (SELECT f.tx_hash FROM pending_fills f WHERE f.status IN ('open', 'unwound'))
ORDER BY x.seen_block, x.tx_hash
LIMIT $1
