-- The insert of trade rows into the hot ledger, the one place its columns are written: the rows
-- of {rows} (a JSON array of trade rows) as they are, their seqs from the statement's `alloc`
-- CTE (its `base`: the seq before the first row, taken from ledger_head under its row lock),
-- committed at {now} (ms), `pending_id` the value of {pending} (NULL but in live's block commit,
-- which pairs trades with pending fills). Filled into ledger_append.sql and live's commit_block.sql
-- (`pmw_core::pg::ledger::insert_sql`); the column lists are tested against the table and
-- TradeRow.
INSERT INTO ledger (block_number, log_index, block_hash, version, seq, tx_hash, block_time_ms,
                    exchange, exchange_version, order_hash, maker, taker, side, token_id,
                    shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled,
                    retracted, audit, committed_ms, pending_id)
SELECT t.block_number, t.log_index, t.block_hash, t.version, alloc.base + t.n, t.tx_hash,
       t.block_time_ms, t.exchange, t.exchange_version, t.order_hash, t.maker, t.taker,
       t.side, t.token_id, t.shares, t.collateral, t.price, t.fee, t.fee_asset,
       t.t_detect_ms, t.backfilled, t.retracted, t.audit, {now}, {pending}
FROM alloc, ROWS FROM (jsonb_to_recordset({rows}::jsonb) AS (
         block_number bigint, log_index integer, block_hash text, version bigint,
         tx_hash text, block_time_ms bigint, exchange text, exchange_version smallint,
         order_hash text, maker text, taker text, side smallint, token_id text, shares text,
         collateral text, price text, fee text, fee_asset text, t_detect_ms bigint,
         backfilled smallint, retracted smallint, audit smallint))
     WITH ORDINALITY AS t (block_number, log_index, block_hash, version, tx_hash,
         block_time_ms, exchange, exchange_version, order_hash, maker, taker, side, token_id,
         shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled, retracted, audit, n)
