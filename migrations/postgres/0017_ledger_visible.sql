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
-- order on (block_number, log_index) reach the primary key (or `ledger_maker`) exactly as when
-- each statement spelled the rule out, and the rule stays two anti-joins (a newer version
-- probed by primary key per row; the committed hash by chain_blocks' key, or hashed), never a
-- sort of the range's versions. The views' columns are fixed when they are created: a column
-- added to `ledger` later must be added here too (pmw-live's ledger tests compare them).
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
