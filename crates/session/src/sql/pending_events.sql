-- The pending lane's read (push, crates/session/src/pending.rs): the pending tier's events after
-- id $1, in id order, at most $2, each with its fill, its transaction's first sighting and
-- whether the fill is still open (a `pending` whose fill already ended is passed over: its
-- `trade` or `void` may be out already). Migration 0023.
SELECT e.id, e.kind, e.reason, f.status = 'open',
       f.id, f.tx_hash, f.order_hash, f.maker, f.taker, f.token_id, f.side, f.making, f.taking,
       f.exchange, t.first_seen_ms
FROM pending_events e
JOIN pending_fills f ON f.id = e.fill_id
JOIN pending_txs t ON t.tx_hash = f.tx_hash
WHERE e.id > $1
ORDER BY e.id
LIMIT $2
