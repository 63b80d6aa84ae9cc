-- pmw:ledger_seam: where the hot ledger starts (blocks below floor_block are read from
-- ClickHouse) and how far the projector got (every row with seq <= seq is in ClickHouse).
SELECT /* pmw:ledger_seam */ floor_block, seq FROM stored_cursor WHERE id = 1
