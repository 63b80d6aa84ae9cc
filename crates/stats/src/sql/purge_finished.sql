-- Delete one batch of a table's finished rows past their retention, oldest first: $1 = cutoff
-- (ms), $2 = batch size, $3 = the stats writer epoch (the fence: a deposed instance deletes
-- nothing). The code fills in the table, its finished states and the fence; the inner
-- predicate is the partial index's own (migration 4), the outer one re-checks state and age.
DELETE FROM {table} t WHERE t.id IN (
    SELECT id FROM {table} WHERE state IN ({finished}) AND done_ms < $1
    ORDER BY done_ms LIMIT $2)
  AND t.state IN ({finished}) AND t.done_ms < $1 AND {fence}
