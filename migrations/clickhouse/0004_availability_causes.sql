-- What each availability sample also saw (issue 47): the webhook lane's lag and the facts that
-- name an incident's cause. Written by pmw-stats' sampler only (read from Postgres once a
-- second), so no delivery service writes ClickHouse for it. Older rows read the defaults
-- (nothing late, nothing recorded). Statements are separated by ';' at the end of a line; no
-- question marks anywhere in this file (the client treats them as bind placeholders).
-- webhook_lag_ms: how long the oldest trade the webhook lane owes (past its cursor, at or below
-- the watermark) has been readable (0: none owed; -1: no webhook cursor, not measured).
-- pg_ok: 0 when Postgres did not answer the sample's read. ch_ok: 0 when the sampler's last
-- write to ClickHouse had failed (the sample waited in its buffer). push_epoch: the push leader's
-- epoch (0: not read); live_instance: the pmw-live instance whose writer heartbeat was read (the
-- live leader); providers_demoted: RPC providers that leader did not count as healthy;
-- newest_start_ms and newest_start_service: the latest start of any pmw service instance
-- (heartbeats.started_ms, pmw-stats left out): a deploy or a restart.
ALTER TABLE availability_samples ADD COLUMN webhook_lag_ms Int64 DEFAULT -1;
ALTER TABLE availability_samples ADD COLUMN webhook_ok UInt8 DEFAULT 1;
ALTER TABLE availability_samples ADD COLUMN webhook_down_since_ms Int64 DEFAULT 0;
ALTER TABLE availability_samples ADD COLUMN pg_ok UInt8 DEFAULT 1;
ALTER TABLE availability_samples ADD COLUMN ch_ok UInt8 DEFAULT 1;
ALTER TABLE availability_samples ADD COLUMN push_epoch Int64 DEFAULT 0;
ALTER TABLE availability_samples ADD COLUMN live_instance String DEFAULT '';
ALTER TABLE availability_samples ADD COLUMN providers_demoted UInt32 DEFAULT 0;
ALTER TABLE availability_samples ADD COLUMN newest_start_ms Int64 DEFAULT 0;
ALTER TABLE availability_samples ADD COLUMN newest_start_service String DEFAULT '';
