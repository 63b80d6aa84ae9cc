-- The pending fills still open of the wallets $1 and the market tokens $2, in id order: what a
-- session opted in to `pending` is sent when it connects or resumes (crates/session/src/pending.rs).
-- Same columns as pending_events.sql, event id 0.
SELECT 0::bigint, 'pending', NULL::text, true,
       f.id, f.tx_hash, f.order_hash, f.maker, f.taker, f.token_id, f.side, f.making, f.taking,
       f.exchange, t.first_seen_ms
FROM pending_fills f
JOIN pending_txs t ON t.tx_hash = f.tx_hash
WHERE f.status = 'open' AND (f.maker = ANY($1) OR f.token_id = ANY($2))
ORDER BY f.id
