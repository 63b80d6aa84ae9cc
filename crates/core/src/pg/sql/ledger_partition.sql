-- Create and attach the hot-ledger partition for blocks [$1, $2) unless it exists (a function of
-- migration 0016: ATTACH never blocks reads or commits). True when it was created.
SELECT pmw_ledger_partition($1, $2)
