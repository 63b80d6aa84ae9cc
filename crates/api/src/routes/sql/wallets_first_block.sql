-- The first block from the page's `after` block up to its `through` block (the two binds)
-- holding a stored trade of the wallets, 0 when none: where a page's bounded scan starts. Reads
-- the narrow block column of the per-wallet table's primary-key range only. The code fills in
-- the list of quoted, validated lowercase addresses (18.16 has no array IN).
SELECT min(block_number) FROM trades_by_wallet
WHERE wallet IN ({list}) AND block_number >= ? AND block_number <= ?
