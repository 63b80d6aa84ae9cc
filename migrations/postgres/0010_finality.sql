-- Finality (Polygon milestones, the `finalized` block tag).
-- pmw-live records the highest ingested block the chain calls finalized, fenced by its writer
-- lock like the ingest watermark; it is never above the ingest watermark and never moves back.
CREATE TABLE finalized_cursor (
    id           smallint PRIMARY KEY CHECK (id = 1),
    block_number bigint   NOT NULL,
    block_hash   text     NOT NULL,
    updated_ms   bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);

-- Push's finality lane: `final` events follow this cursor through the ledger, behind both the
-- finalized watermark and the WebSocket and webhook lanes (a trade's `final` never precedes
-- its `trade`). Fenced by the push epoch like the other lanes. Starts at the webhook cursor
-- or the finalized watermark, whichever is lower, when push first runs with it.
CREATE TABLE final_cursor (
    slot         smallint PRIMARY KEY,
    block_number bigint   NOT NULL,
    log_index    integer  NOT NULL,
    reorg_id     bigint   NOT NULL DEFAULT 0,
    epoch        bigint   NOT NULL,
    updated_ms   bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);

-- Which events a webhook endpoint receives: `trade` (and its `retract`), `final`, or both.
ALTER TABLE webhook_endpoints ADD COLUMN events text[] NOT NULL DEFAULT '{trade}'
    CHECK (events <@ '{trade,final}'::text[] AND cardinality(events) > 0);

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_kind_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_kind_check
    CHECK (kind IN ('trade', 'retract', 'final'));
