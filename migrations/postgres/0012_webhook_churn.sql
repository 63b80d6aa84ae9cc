-- webhook_deliveries is the busiest table: every delivery is inserted, claimed and finished.
-- A claim changes only unindexed columns (claimed_epoch, claimed_ms): with room left on the
-- page it is a HOT update, which adds no index entry, so the pending index a claim walks keeps
-- one entry per delivery instead of two. Rows are small next to their payload, so 70% costs
-- about 30% more pages for that. Autovacuum visits the table after 2% of it changed (not the
-- default 20%, which with retention's delivered rows would let dead index entries pile up for
-- hours) and without sleeping between pages. Existing pages keep their layout until rewritten.
ALTER TABLE webhook_deliveries SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
