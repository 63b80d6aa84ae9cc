-- The pending fills that ended in [$1, $2) (ms), by how: `confirmed` (its
-- transaction's status time: the block commit that paired it) or the reason of its `void` event
-- (`reverted`, `replaced`, `dropped`, `expired`). Both halves read a partial index of
-- migration 0025.
SELECT reason, count(*)::bigint
FROM (SELECT e.reason FROM pending_events e
      WHERE e.kind = 'void' AND e.created_ms >= $1 AND e.created_ms < $2
      UNION ALL
      SELECT 'confirmed' FROM pending_txs t JOIN pending_fills f ON f.tx_hash = t.tx_hash
      WHERE t.status = 'confirmed' AND t.status_ms >= $1 AND t.status_ms < $2
        AND f.status = 'confirmed') ends
GROUP BY reason
