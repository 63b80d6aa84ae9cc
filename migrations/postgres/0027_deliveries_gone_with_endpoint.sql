-- Webhook deliveries without a foreign key check per row (issue 46): every delivery inserted
-- fired the key's row trigger (a lookup of its endpoint, locked FOR KEY SHARE) although both
-- statements that insert deliveries (crates/core/src/pg/sql/enqueue_deliveries.sql,
-- crates/push/src/webhook/sql/enqueue_pending.sql) already lock each endpoint once FOR KEY
-- SHARE and insert only for the endpoints they locked. On the dev stack an insert of 50,000
-- rows took 17.5 µs a row with the key and 10.3 µs without.
--
-- What the key's ON DELETE CASCADE did is kept by a statement trigger: deleting endpoints
-- (the API's delete, or an account's delete cascading to its endpoints) deletes their
-- deliveries in the same transaction. No delivery of a deleted endpoint is left: an enqueue
-- that locked the endpoint first makes the delete wait for its commit, and the trigger's
-- DELETE, a new statement, then sees its rows; an enqueue after the delete finds no endpoint
-- to lock and inserts nothing for it.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_endpoint_id_fkey;

CREATE FUNCTION pmw_endpoint_deliveries_gone() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    DELETE FROM webhook_deliveries d USING gone g WHERE d.endpoint_id = g.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_endpoints_gone AFTER DELETE ON webhook_endpoints
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION pmw_endpoint_deliveries_gone();
