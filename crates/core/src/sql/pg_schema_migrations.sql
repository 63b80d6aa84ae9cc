-- Postgres's record of applied migrations (created on first migrate).
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text    NOT NULL,
    checksum   text    NOT NULL,
    applied_ms bigint  NOT NULL
)
