-- The hot ledger's reorg visibility rule, written once. Every read of the ledger's trades goes
-- through one of these two views; none repeats the rule.
--
-- `ledger_latest`: the newest version of each trade identity (block_number, log_index,
-- block_hash), retracted or not (what a rewind retracts, what the audit compares).
-- `ledger_visible`: of those, the trades a reader may deliver: not retracted, and of the block
-- hash chain_blocks committed for their block (an orphaned row whose retraction is missing is
-- never read; a block chain_blocks does not hold yet hides nothing).
--
-- Both are plain views: the planner inlines them into each statement, so a reader's range and
-- order on (block_number, log_index) reach the primary key (or `ledger_maker`) as before, and
-- the rule stays two anti-joins probed by index per row: no sort and no scan of the range's
-- older versions. A column added to `ledger` later must be added here too (the views' columns
-- are fixed when they are created; `pmw_core::pg::columns` tests them against the table).
CREATE VIEW ledger_latest AS
SELECT l.*
FROM ledger l
WHERE NOT EXISTS (SELECT 1 FROM ledger n
                  WHERE n.block_number = l.block_number AND n.log_index = l.log_index
                    AND n.block_hash = l.block_hash AND n.version > l.version);

CREATE VIEW ledger_visible AS
SELECT l.*
FROM ledger_latest l
WHERE l.retracted = 0
  AND NOT EXISTS (SELECT 1 FROM chain_blocks c
                  WHERE c.block_number = l.block_number AND c.block_hash <> l.block_hash);
