-- ClickHouse's record of applied migrations (created on first migrate).
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    UInt32,
    name       String,
    checksum   String,
    applied_ms Int64
) ENGINE = MergeTree() ORDER BY version
