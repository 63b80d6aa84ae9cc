-- Every stored version of the trades after a cursor up to a block (push's round read when it is
-- small): no ORDER BY, no LIMIT BY. The caller keeps the newest version of each identity and drops
-- retracted ones (`store::visible::latest_visible`), and falls back to trades_after.sql when the
-- answer reaches the limit. ClickHouse's sort and LIMIT BY cost more than the rows on a table
-- with fresh parts. Binds: after block, through block, after (block, log index), limit.
SELECT {COLUMNS} FROM trades
WHERE block_number >= ? AND block_number <= ? AND (block_number, log_index) > (?, ?)
LIMIT ?
