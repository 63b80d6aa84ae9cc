-- Every stored version of the trades after a cursor up to a block, in ledger order, bounded
-- (push's round read): no LIMIT BY. The caller keeps the newest version of each identity and
-- drops retracted ones (`store::visible::latest_visible`); when the bound cuts the answer, only
-- positions before the last one read are complete, and trades_after.sql answers when those hold
-- too few visible trades. ClickHouse's LIMIT BY pipeline costs more than the rows on a table with
-- fresh parts. Binds: after block, through block, after (block, log index), bound.
SELECT {COLUMNS} FROM trades
WHERE block_number >= ? AND block_number <= ? AND (block_number, log_index) > (?, ?)
ORDER BY block_number, log_index
LIMIT ?
