-- The pending tier to webhooks (#43, docs/SETTLEMENT.md "Delivery"): an endpoint may opt in to
-- `pending` beside `trade` in its `events`, and push's pending lane queues `pending` and `void`
-- deliveries (their `block_number`/`log_index` are 0: they take no ledger position, and they are
-- claimed before a trade of the same endpoint).

ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_events_check;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_events_check
    CHECK (events <@ '{trade,final,pending}'::text[] AND cardinality(events) > 0
           AND (NOT 'pending' = ANY (events) OR 'trade' = ANY (events)));

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_kind_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_kind_check
    CHECK (kind IN ('trade', 'retract', 'final', 'pending', 'void'));
