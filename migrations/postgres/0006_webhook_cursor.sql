-- The webhook lane's own cursor: push rounds move `push_cursor` and feed WebSocket sessions
-- only; a second lane, fenced by the same push epoch, reads the same ledger behind it, queues
-- `webhook_deliveries` for the followers' endpoints and moves this cursor in the same
-- transaction. WebSocket dispatch never waits for webhook work, and each round's fenced
-- transaction stays O(1) in the number of endpoints and accounts.
-- Starts where the push cursor stands (deliveries up to there were queued by the push rounds).
CREATE TABLE webhook_cursor (
    slot         smallint PRIMARY KEY,
    block_number bigint   NOT NULL,
    log_index    integer  NOT NULL,
    reorg_id     bigint   NOT NULL DEFAULT 0,
    epoch        bigint   NOT NULL,
    updated_ms   bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);

INSERT INTO webhook_cursor (slot, block_number, log_index, reorg_id, epoch, updated_ms)
SELECT slot, block_number, log_index, reorg_id, epoch, updated_ms FROM push_cursor;
