-- Rows appended to the hot ledger as they are (an audit's corrections: backfilled fills and
-- retractions, each with its own version), in the caller's transaction, seqs from ledger_head
-- under its row lock. $1 the rows (a JSON array of trade rows), $2 their count, $3 now (ms).
WITH alloc AS (
    UPDATE ledger_head SET seq = seq + $2::bigint WHERE id = 1 AND $2::bigint > 0
    RETURNING seq - $2::bigint AS base
)
INSERT INTO ledger (block_number, log_index, block_hash, version, seq, tx_hash, block_time_ms,
                    exchange, exchange_version, order_hash, maker, taker, side, token_id,
                    shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled,
                    retracted, audit, committed_ms)
SELECT t.block_number, t.log_index, t.block_hash, t.version, alloc.base + t.n, t.tx_hash,
       t.block_time_ms, t.exchange, t.exchange_version, t.order_hash, t.maker, t.taker,
       t.side, t.token_id, t.shares, t.collateral, t.price, t.fee, t.fee_asset,
       t.t_detect_ms, t.backfilled, t.retracted, t.audit, $3
FROM alloc, ROWS FROM (jsonb_to_recordset($1::jsonb) AS (
         block_number bigint, log_index integer, block_hash text, version bigint,
         tx_hash text, block_time_ms bigint, exchange text, exchange_version smallint,
         order_hash text, maker text, taker text, side smallint, token_id text, shares text,
         collateral text, price text, fee text, fee_asset text, t_detect_ms bigint,
         backfilled smallint, retracted smallint, audit smallint))
     WITH ORDINALITY AS t (block_number, log_index, block_hash, version, tx_hash,
         block_time_ms, exchange, exchange_version, order_hash, maker, taker, side, token_id,
         shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled, retracted, audit, n)
