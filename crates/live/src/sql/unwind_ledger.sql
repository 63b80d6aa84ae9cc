-- A reorg's retractions, appended to the hot ledger in the unwind's transaction: every trade
-- of a block above the common ancestor ($1) whose newest version (the view ledger_latest,
-- migration 0017) is not retracted, of any block hash, gets a newer version with retracted = 1
-- (at least $2, above the version it replaces), seqs from ledger_head under its row lock. $3
-- now (ms). The pending fills those trades confirmed become `unwound` and their transactions
-- `open` again (migration 0026): the re-mined settlement's commit pairs them again, or the
-- resolution voids them. Returns the retracted trades' count.
WITH gone AS (
    SELECT *, row_number() OVER (ORDER BY block_number, log_index, block_hash) AS n
    FROM ledger_latest WHERE block_number > $1 AND retracted = 0
), alloc AS (
    UPDATE ledger_head SET seq = ledger_head.seq + c.n
    FROM (SELECT count(*) AS n FROM gone) c
    WHERE id = 1 AND c.n > 0
    RETURNING ledger_head.seq - c.n AS base
), appended AS (
    INSERT INTO ledger (block_number, log_index, block_hash, version, seq, tx_hash, block_time_ms,
                        exchange, exchange_version, order_hash, maker, taker, side, token_id,
                        shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled,
                        retracted, audit, committed_ms, pending_id)
    SELECT g.block_number, g.log_index, g.block_hash, greatest($2::bigint, g.version + 1), alloc.base + g.n,
           g.tx_hash, g.block_time_ms, g.exchange, g.exchange_version, g.order_hash, g.maker,
           g.taker, g.side, g.token_id, g.shares, g.collateral, g.price, g.fee, g.fee_asset,
           g.t_detect_ms, g.backfilled, 1, g.audit, $3, g.pending_id
    FROM gone g, alloc
    RETURNING version
), unwound AS (
    UPDATE pending_fills f SET status = 'unwound', confirmed_ledger = NULL
    WHERE f.status = 'confirmed'
      AND f.id IN (SELECT g.pending_id FROM gone g WHERE g.pending_id IS NOT NULL)
    RETURNING f.tx_hash
), reopened AS (
    UPDATE pending_txs x SET status = 'open', status_block = NULL, status_ms = NULL
    WHERE x.status = 'confirmed' AND x.tx_hash IN (SELECT u.tx_hash FROM unwound u)
    RETURNING 1
)
SELECT count(*)::bigint, coalesce(max(version), 0)::bigint FROM appended
