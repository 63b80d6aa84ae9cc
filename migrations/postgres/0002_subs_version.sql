-- The subscription index's version. Every change to what push matches on (accounts, API keys,
-- subscriptions, webhook endpoints) bumps one counter in the same transaction, by statement
-- triggers, so nothing that writes those tables can forget it. A push round reads this counter
-- in the same statement (one snapshot) as the ingest watermark and reloads its in-memory index
-- when it moved: the NOTIFY on `pmw_subscriptions` is only a wake-up, and a NOTIFY can be lost
-- (sent before the listener's LISTEN, or while its session reconnects). A tiny table with no
-- index on the updated column and a low fillfactor, so the updates stay HOT.
CREATE TABLE subs_version (
    id  smallint PRIMARY KEY CHECK (id = 1),
    seq bigint   NOT NULL
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
INSERT INTO subs_version (id, seq) VALUES (1, 0);

CREATE FUNCTION bump_subs_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE subs_version SET seq = seq + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER accounts_bump_subs_version AFTER INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version();
CREATE TRIGGER api_keys_bump_subs_version AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version();
CREATE TRIGGER subscriptions_bump_subs_version AFTER INSERT OR UPDATE OR DELETE ON subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version();
CREATE TRIGGER webhook_endpoints_bump_subs_version AFTER INSERT OR UPDATE OR DELETE ON webhook_endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subs_version();
