-- Drop one day partition of a table of ours. The code fills in the table (a constant of the
-- caller) and the partition id (a validated integer literal from system.parts).
ALTER TABLE {table} DROP PARTITION ID '{id}'
