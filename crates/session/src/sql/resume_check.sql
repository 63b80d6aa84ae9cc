-- Whether a client's block is still canonical, and if not where to resume it from.
-- $1 the client's block, $2 when its trade was ingested (ms; 0 if unknown).
-- Returns: the canonical hash at $1 (chain_blocks), the lowest block chain_blocks still holds,
-- the watermark, and the lowest ancestor (with its hash) of the reorgs that reached below $1
-- after the client's trade was ingested (every reorg that covered $1 when $2 is 0).
SELECT (SELECT block_hash FROM chain_blocks WHERE block_number = $1),
       (SELECT min(block_number) FROM chain_blocks),
       (SELECT block_number FROM ingest_cursor WHERE id = 1),
       r.ancestor,
       (SELECT block_hash FROM chain_blocks WHERE block_number = r.ancestor)
FROM (SELECT min(ancestor) AS ancestor FROM reorgs
      WHERE ancestor < $1 AND (CASE WHEN $2::bigint > 0 THEN detected_ms >= $2::bigint ELSE old_head >= $1 END)) r
