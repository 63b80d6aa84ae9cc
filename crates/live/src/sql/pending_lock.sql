-- The pending recorder's first statement in its transaction: wait for any block commit in
-- flight (it holds this row's lock until it commits) and keep the next one out until this
-- transaction ends, so the check that follows (pending_mined.sql, a new statement and so a
-- new snapshot) sees every trade committed before, and every later commit sees this record.
SELECT seq FROM ledger_head WHERE id = 1 FOR SHARE
