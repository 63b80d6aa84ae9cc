-- pmw ClickHouse schema: facts. Times are Int64 milliseconds since the Unix epoch (UTC) in *_ms
-- columns: no DateTime64, no strings, nothing interpreted in a session timezone.
-- Runs on ClickHouse 18.16. Statements are separated by ';' at the end of a line.
-- Note: no question marks anywhere in this file (the client treats them as bind placeholders).

-- Every decoded OrderFilled. Identity is (block_number, log_index) on a given block_hash; a crash
-- between insert and watermark re-inserts the same block, and a reorg inserts the orphaned rows
-- again with retracted = 1 and a higher version. Read with FINAL (or LIMIT 1 BY).
-- Amounts are exact decimal strings (uint256 does not fit 18.16's integer types).
CREATE TABLE IF NOT EXISTS trades (
    block_number     UInt64,
    log_index        UInt32,
    block_hash       String,
    tx_hash          String,
    block_time_ms    Int64,
    exchange         String,
    exchange_version UInt8,
    order_hash       String,
    maker            String,
    taker            String,
    side             UInt8,
    token_id         String,
    shares           String,
    collateral       String,
    price            String,
    fee              String,
    fee_asset        String,
    t_detect_ms      Int64,
    backfilled       UInt8,
    retracted        UInt8,
    version          UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (block_number, log_index, block_hash);

-- The per-wallet copy for keyset backfill, keyed by the fill's owner (its maker).
CREATE TABLE IF NOT EXISTS trades_by_wallet (
    wallet           String,
    block_number     UInt64,
    log_index        UInt32,
    block_hash       String,
    tx_hash          String,
    block_time_ms    Int64,
    exchange         String,
    exchange_version UInt8,
    order_hash       String,
    maker            String,
    taker            String,
    side             UInt8,
    token_id         String,
    shares           String,
    collateral       String,
    price            String,
    fee              String,
    fee_asset        String,
    t_detect_ms      Int64,
    backfilled       UInt8,
    retracted        UInt8,
    version          UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (wallet, block_number, log_index, block_hash);

-- One row per ingested block. head_lead_ms = t_detect_ms - block timestamp (often negative);
-- it is a clock diagnostic, never a latency origin.
CREATE TABLE IF NOT EXISTS ingest_latency (
    block_number UInt64,
    block_hash   String,
    t_detect_ms  Int64,
    t_logs_ms    Int64,
    t_stored_ms  Int64,
    head_lead_ms Int64,
    trade_count  UInt32,
    backfilled   UInt8
) ENGINE = ReplacingMergeTree()
PARTITION BY intDiv(t_detect_ms, 86400000)
ORDER BY (block_number, block_hash);

-- One row per delivered message (WS frame or successful webhook).
CREATE TABLE IF NOT EXISTS push_latency (
    block_number UInt64,
    log_index    UInt32,
    channel      String,
    target_id    UInt64,
    t_detect_ms  Int64,
    t_push_ms    Int64,
    epoch        UInt64,
    backfilled   UInt8
) ENGINE = MergeTree()
PARTITION BY intDiv(t_push_ms, 86400000)
ORDER BY (t_push_ms, block_number, log_index);

-- Every webhook attempt.
CREATE TABLE IF NOT EXISTS delivery_log (
    delivery_id  String,
    endpoint_id  UInt64,
    account_id   UInt64,
    attempt      UInt32,
    kind         String,
    block_number UInt64,
    log_index    UInt32,
    t_attempt_ms Int64,
    duration_ms  Int64,
    status_code  UInt16,
    outcome      String,
    error        String
) ENGINE = MergeTree()
PARTITION BY intDiv(t_attempt_ms, 86400000)
ORDER BY (endpoint_id, t_attempt_ms, delivery_id);
