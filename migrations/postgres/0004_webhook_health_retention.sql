-- Persistently failing webhook endpoints, and retention of finished rows.

-- An endpoint whose every attempt has failed since `since_ms` (the first failure after its last
-- success). The dispatcher inserts the row on such a failure, deletes it on a success, and
-- disables the endpoint when an attempt fails while `since_ms` is older than the configured
-- period. Its own tiny table: the transitions never touch `webhook_endpoints`, whose statement
-- trigger would bump `subs_version` (and make push reload its subscription index) each time.
CREATE TABLE webhook_failing (
    endpoint_id bigint PRIMARY KEY REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    since_ms    bigint NOT NULL
) WITH (fillfactor = 50);

-- Retention (pmw-stats) deletes finished rows oldest first, in bounded batches: these indexes
-- find them without scanning the live rows. Their predicates are exactly the retention
-- queries' own.
CREATE INDEX ws_claims_done ON ws_claims (done_ms) WHERE state IN ('delivered', 'voided');
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (done_ms)
    WHERE state IN ('delivered', 'failed');
