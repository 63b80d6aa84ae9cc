-- The completeness audit: pmw-live re-reads every finalized block range with eth_getLogs and
-- compares the fills with the stored trades; a missing fill is backfilled, an extra one retracted.

-- Why a `reorgs` row exists: a chain reorg ('reorg'), or an audit correction ('audit': a fill
-- backfilled or retracted in a finalized block). Push rewinds to `ancestor` either way; chain
-- reorg figures count 'reorg' rows only.
ALTER TABLE reorgs ADD COLUMN cause text NOT NULL DEFAULT 'reorg'
    CHECK (cause IN ('reorg', 'audit'));

-- How far the audit got: every block up to block_number was compared with the chain. Fenced by
-- the live writer lock; never above the finalized watermark; never moves back.
CREATE TABLE audit_cursor (
    id           smallint PRIMARY KEY CHECK (id = 1),
    block_number bigint   NOT NULL,
    updated_ms   bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);

-- One row per audited range [from_block, to_block]: what was compared and found, when, and where
-- the ingest watermark (head) stood then, so windows can be aggregated (pmw-stats, pmwctl).
-- to_block_time_ms is the chain's timestamp of to_block: audited_ms minus it is how long after
-- its block a fill was audited. Rows older than 35 days are pruned by pmw-live.
CREATE TABLE audit_ranges (
    id               bigserial PRIMARY KEY,
    from_block       bigint  NOT NULL,
    to_block         bigint  NOT NULL,
    fills_checked    integer NOT NULL,
    missing          integer NOT NULL,
    extra            integer NOT NULL,
    audited_ms       bigint  NOT NULL,
    head_block       bigint  NOT NULL,
    to_block_time_ms bigint  NOT NULL,
    CHECK (to_block >= from_block)
);
CREATE INDEX audit_ranges_audited ON audit_ranges (audited_ms);
