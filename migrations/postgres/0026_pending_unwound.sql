-- A confirmation a reorg takes back (issue 43, found by pmw-check): a pending fill whose
-- confirming trade the unwind retracts becomes `unwound` (its transaction `open` again) in the
-- unwind's statement (crates/live/src/sql/unwind_ledger.sql). The fill is then ended again,
-- once: the re-mined settlement's commit pairs it as it pairs an open fill (the new trade
-- carries its `pending_id`), or the resolution voids it as it voids an open one. It is not
-- `open`: it is never announced again (a subscriber had its trade), and the rest of the pending
-- tier treats it as ended. Without this a fill whose confirming trade an endpoint never got
-- (cancelled by its retract before delivery) stayed open there for good: the re-mined trade
-- named no fill.
ALTER TABLE pending_fills DROP CONSTRAINT pending_fills_status_check;
ALTER TABLE pending_fills ADD CONSTRAINT pending_fills_status_check
    CHECK (status IN ('open', 'unwound', 'confirmed', 'reverted', 'replaced', 'dropped', 'expired'));

-- The block commit looks unwound fills up by order hash as it does open ones.
CREATE INDEX pending_fills_unwound ON pending_fills (order_hash) WHERE status = 'unwound';

CREATE OR REPLACE FUNCTION pmw_pending_confirm(trades jsonb, base bigint, block bigint, now_ms bigint)
RETURNS TABLE (n bigint, pending_id bigint, mismatch boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pending_fills WHERE status = 'open')
       AND NOT EXISTS (SELECT 1 FROM pending_fills WHERE status = 'unwound') THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH t AS (
        SELECT r.n, r.tx_hash, r.order_hash,
               CASE WHEN r.side = 0 THEN r.collateral ELSE r.shares END AS making,
               CASE WHEN r.side = 0 THEN r.shares ELSE r.collateral END AS taking
        FROM ROWS FROM (jsonb_to_recordset(trades) AS (tx_hash text, order_hash text,
                        side smallint, shares text, collateral text))
             WITH ORDINALITY AS r (tx_hash, order_hash, side, shares, collateral, n)
    ), cand AS (
        SELECT t.n, f.id, f.tx_hash = t.tx_hash AS same_tx, f.taking <> t.taking AS differs
        FROM t JOIN pending_fills f
          ON f.order_hash = t.order_hash AND f.status IN ('open', 'unwound')
         AND (f.tx_hash = t.tx_hash OR f.making = t.making)
    ), per_trade AS (
        SELECT DISTINCT ON (c.n) c.n, c.id, c.differs
        FROM cand c ORDER BY c.n, c.same_tx DESC, c.id
    ), pairs AS (
        SELECT DISTINCT ON (p.id) p.n, p.id, p.differs
        FROM per_trade p ORDER BY p.id, p.n
    ), fills AS (
        UPDATE pending_fills f
        SET status = 'confirmed', confirmed_ledger = base + p.n
        FROM pairs p
        WHERE f.id = p.id AND f.status IN ('open', 'unwound')
        RETURNING f.id, f.tx_hash
    ), txs AS (
        UPDATE pending_txs x
        SET status = 'confirmed', status_block = block, status_ms = now_ms
        WHERE x.tx_hash IN (SELECT fills.tx_hash FROM fills) AND x.status = 'open'
        RETURNING 1
    )
    SELECT p.n, p.id, p.differs
    FROM pairs p JOIN fills ON fills.id = p.id;
END
$$;
