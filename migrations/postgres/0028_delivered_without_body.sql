-- A delivered webhook delivery keeps no body (issue 46). The body is what an attempt sends; once
-- delivered, nothing reads it again: the API lists deliveries without bodies, a replay renders
-- each message anew from the ledger and puts its body back (enqueue_deliveries.sql's requeue),
-- and the retract, `final` and `void` rules read a delivery's state, not its body. The
-- `delivered` update writes a new row version either way (it is never a HOT update); without
-- the body that version is ~150 bytes instead of ~1.3 KB, so the update writes a fraction of
-- the heap and WAL it did, and a delivered row kept for its retention takes that much less disk.
-- Pending and failed rows keep their bodies (a failed delivery can be inspected; a pending one
-- is still to be sent), which the check below enforces for every new write.
ALTER TABLE webhook_deliveries ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_body_kept
    CHECK (payload IS NOT NULL OR state = 'delivered') NOT VALID;
