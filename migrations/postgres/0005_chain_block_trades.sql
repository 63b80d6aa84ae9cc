-- How many trades pmw-live stored for each recorded block (NULL: recorded before this column).
-- Push reads a catch-up in bounded block spans and moves past a span's empty or fully read blocks
-- only when every block returned exactly its recorded count, so a short answer from ClickHouse
-- never skips a trade.
ALTER TABLE chain_blocks ADD COLUMN trade_count integer;
