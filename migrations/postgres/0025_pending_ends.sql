-- The pending tier on the dashboard (issue 43 item 6): pmw-stats counts the pending fills that
-- ended in each window (1h to 30d), by how they ended, from the pending tables. These partial
-- indexes keep that read to the window's rows: a fill's void is its `void` event (by
-- created_ms), a confirmation is its transaction's status time.
CREATE INDEX pending_events_voids ON pending_events (created_ms) WHERE kind = 'void';
CREATE INDEX pending_txs_confirmed ON pending_txs (status_ms) WHERE status = 'confirmed';
