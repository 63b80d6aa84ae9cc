-- What a lane's round reads, in one statement (one snapshot, one round trip): the lane's
-- watermark (the ingest one, or the finalized one for the finality lane), the subscription
-- index's version, the reorgs recorded after this lane's last one (the newest id, the lowest
-- common ancestor among them and its hash), the hot ledger's floor, and the trades and
-- retractions the round delivers. The code (push's `ledger::Source`) fills in per lane the
-- placeholders in braces: the marker comment's round name (`pmwctl diag` counts the WebSocket
-- lane's `pmw:push_round` calls in pg_stat_statements), the watermark's table, the webhook
-- lane's extra `lane` column (pg_stat_statements merges statements by structure, not by
-- comment, so it keeps the webhook rounds apart) and the ledger's columns.
-- $1 the lane's last reorgs id, ($2, $3) its cursor, $4 the batch limit, ($5, $6) the highest
-- cursor it ever held, $7 the block it may not read past (its bound), $8 the ledger seq up to
-- which it delivered every row up to ($5, $6). Delivery starts at the cursor, or after the
-- common ancestor of the new reorgs when that is below it (then the retractions up to the held
-- cursor come too: trades whose newest version is a retraction, any block hash). Trades are the
-- hot ledger's visible ones (the view ledger_visible, migration 0017), ledger order, at most
-- $4, minus those the lane delivered already (seq at most $8, at or below the held cursor: a
-- rewind, however deep, repeats no trade; an audit's backfilled fill or a new branch has a
-- newer seq). Each row carries its `pending_id` (the pending fill it confirmed, migration 0023).
-- `head_seq` is the last seq committed in this snapshot,
-- `held_hash` the hash of the held cursor's block. The hot ledger holds blocks from `floor` on:
-- a lane starting below it reads the rest through the one ledger (ClickHouse below the floor).
-- Without a watermark (no finalized block yet, for the finality lane) `upto` is NULL and no row
-- is read: least() would skip the NULL and read every row up to the bound, for nothing.
WITH s AS MATERIALIZED (
    SELECT /* pmw:{round} */ (SELECT block_number FROM {watermark} WHERE id = 1) AS wm,
           (SELECT seq FROM subs_version WHERE id = 1) AS version,
           (SELECT max(id) FROM reorgs WHERE id > $1) AS reorg_id,
           (SELECT min(ancestor) FROM reorgs WHERE id > $1) AS ancestor,
           (SELECT floor_block FROM stored_cursor WHERE id = 1) AS floor,
           (SELECT seq FROM ledger_head WHERE id = 1) AS head_seq
), f AS MATERIALIZED (
    SELECT s.*,
           CASE WHEN s.ancestor < $2 THEN s.ancestor ELSE $2 END AS from_block,
           CASE WHEN s.ancestor < $2 THEN 999999 ELSE $3 END AS from_log,
           CASE WHEN s.wm IS NOT NULL THEN least(s.wm, $7) END AS upto
    FROM s
)
SELECT f.wm, f.version, f.reorg_id, f.ancestor,
       (SELECT block_hash FROM chain_blocks WHERE block_number = f.ancestor),
       f.floor,
       (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.block_number, t.log_index) FROM (
            SELECT {COLUMNS}, seq, pending_id FROM ledger_visible l
            WHERE l.block_number >= f.from_block AND l.block_number <= f.upto
              AND (l.block_number, l.log_index) > (f.from_block, f.from_log)
              AND NOT (l.seq <= $8 AND (l.block_number, l.log_index) <= ($5, $6))
            ORDER BY l.block_number, l.log_index
            LIMIT $4
        ) t) AS trades,
       (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.block_number, r.log_index) FROM (
            SELECT {COLUMNS}, pending_id FROM ledger_latest
            WHERE block_number > f.from_block AND block_number <= $5 AND retracted = 1
              AND (block_number, log_index) <= ($5, $6)
        ) r WHERE f.from_block < $2) AS retracts,
       f.head_seq,
       (SELECT block_hash FROM chain_blocks WHERE block_number = $5) AS held_hash{lane}
FROM f
