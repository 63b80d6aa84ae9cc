-- The voids of the wallets $1 and the market tokens $2 appended since the resume point's block
-- $3 was detected (its earliest ledger row; none: nothing), the newest $4 of them: a resuming
-- session opted in to `pending` is sent them after the open fills, so a `pending` it held when it
-- went away ends for it too (crates/session/src/pending.rs). Reads the partial index of voids by
-- time (migration 0025). Same columns as pending_events.sql.
SELECT e.id, e.kind, e.reason, f.status = 'open',
       f.id, f.tx_hash, f.order_hash, f.maker, f.taker, f.token_id, f.side, f.making, f.taking,
       f.exchange, t.first_seen_ms
FROM pending_events e
JOIN pending_fills f ON f.id = e.fill_id
JOIN pending_txs t ON t.tx_hash = f.tx_hash
WHERE e.kind = 'void'
  AND e.created_ms >= (SELECT min(l.t_detect_ms) FROM ledger l WHERE l.block_number = $3)
  AND (f.maker = ANY($1) OR f.token_id = ANY($2))
ORDER BY e.created_ms DESC, e.id DESC
LIMIT $4
