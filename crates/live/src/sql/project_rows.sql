-- The projector's next batch: hot-ledger rows after seq $1, in seq (commit) order, at most $2.
-- {COLUMNS} are the trade columns (filled in by the code); seq comes last.
SELECT {COLUMNS}, seq FROM ledger WHERE seq > $1 ORDER BY seq LIMIT $2
