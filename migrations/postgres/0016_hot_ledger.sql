-- The hot ledger: the newest blocks' trades, committed by pmw-live in the same statement that
-- moves the ingest watermark, and read by push by cursor. Append-only: a reorg unwind or an
-- audit correction appends a newer version (retracted = 1, or a backfilled fill), never an
-- update in place, never a per-row delete. Partitioned by block range; a partition is dropped
-- whole once every row of it is projected to ClickHouse and it is older than the retention
-- window (live's projector). Readers keep, per identity (block_number, log_index, block_hash),
-- the newest version, drop retracted ones, and keep only the block hash chain_blocks committed.
CREATE TABLE ledger (
    block_number     bigint   NOT NULL,
    log_index        integer  NOT NULL,
    block_hash       text     NOT NULL,
    version          bigint   NOT NULL,
    -- Commit order: allocated from ledger_head under its row lock, so a reader by seq never
    -- sees a later seq commit before an earlier one. The projector's cursor.
    seq              bigint   NOT NULL,
    tx_hash          text     NOT NULL,
    block_time_ms    bigint   NOT NULL,
    exchange         text     NOT NULL,
    exchange_version smallint NOT NULL,
    order_hash       text     NOT NULL,
    maker            text     NOT NULL,
    taker            text     NOT NULL,
    side             smallint NOT NULL,
    token_id         text     NOT NULL,
    shares           text     NOT NULL,
    collateral       text     NOT NULL,
    price            text     NOT NULL,
    fee              text     NOT NULL,
    fee_asset        text     NOT NULL,
    t_detect_ms      bigint   NOT NULL,
    backfilled       smallint NOT NULL,
    retracted        smallint NOT NULL,
    audit            smallint NOT NULL,
    committed_ms     bigint   NOT NULL,
    PRIMARY KEY (block_number, log_index, block_hash, version)
) PARTITION BY RANGE (block_number);
CREATE INDEX ledger_seq ON ledger (seq);
CREATE INDEX ledger_maker ON ledger (maker, block_number, log_index);

-- The last seq allocated. One row; every ledger write updates it in its own transaction, so
-- writers (ingest, unwind, audit) allocate and commit in the same order.
CREATE TABLE ledger_head (
    id  smallint PRIMARY KEY CHECK (id = 1),
    seq bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);
INSERT INTO ledger_head (id, seq) VALUES (1, 0);

-- The projector's fenced cursor (stored_cursor): every ledger row with seq <= seq is in
-- ClickHouse. `floor_block`: the lowest block the ledger still holds; readers take blocks below
-- it from ClickHouse (complete there: a partition's blocks rise above the floor only once all
-- their rows are projected, finalized and audited), and blocks from it on from the ledger.
-- `floor_ms`: when the floor last rose (partitions below it are dropped a while later, so a
-- reader that read the old floor never finds its partition gone). An existing deployment's
-- history up to the watermark is in ClickHouse only: the floor starts above it.
CREATE TABLE stored_cursor (
    id          smallint PRIMARY KEY CHECK (id = 1),
    seq         bigint   NOT NULL,
    floor_block bigint   NOT NULL,
    floor_ms    bigint   NOT NULL,
    updated_ms  bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 500);
INSERT INTO stored_cursor (id, seq, floor_block, floor_ms, updated_ms)
SELECT 1, 0, coalesce((SELECT block_number + 1 FROM ingest_cursor WHERE id = 1), 0), 0, 0;

-- Create (if missing) and attach the partition for blocks [lo, hi). ATTACH takes only a
-- SHARE UPDATE EXCLUSIVE lock on the ledger: reads and commits go on.
CREATE FUNCTION pmw_ledger_partition(lo bigint, hi bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('ledger_p%s', lpad(lo::text, 12, '0'));
BEGIN
    IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'ledger'::regclass AND c.relname = part) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I (LIKE ledger INCLUDING DEFAULTS)', part);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (block_number >= %s AND block_number < %s)',
                   part, part || '_range', lo, hi);
    EXECUTE format('ALTER TABLE ledger ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   part, lo, hi);
    RETURN true;
END
$$;
